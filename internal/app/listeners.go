package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/sluicegw/sluice/internal/server"
)

// Handler is the main port's handler (tests can serve it themselves).
func (a *App) Handler() http.Handler { return a.handlers.Main }

// listen binds and serves the main, admin and SMG listeners; on an error none is left open.
func (a *App) listen() error {
	host := a.cfg.Server.Host
	var err error
	a.main, err = server.Listen(net.JoinHostPort(host, strconv.Itoa(a.cfg.Server.Port)), a.handlers.Main, a.listenOptions("main"))
	if err != nil {
		a.stopBackground()
		return fmt.Errorf("listen (--port): %w", err)
	}
	a.serve(a.main)
	if a.handlers.Admin != nil {
		a.admin, err = server.Listen(net.JoinHostPort(host, strconv.Itoa(a.cfg.Server.AdminPort)), a.handlers.Admin, a.listenOptions("admin"))
		if err != nil {
			_ = a.Shutdown(context.Background())
			return fmt.Errorf("listen admin (--admin-port): %w", err)
		}
		a.serve(a.admin)
	}
	if err := a.startSMGListeners(); err != nil {
		_ = a.Shutdown(context.Background())
		return err
	}
	return nil
}

func (a *App) serve(s *server.Server) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := s.Serve(); err != nil {
			a.logger.Error("server stopped", "err", err)
		}
	}()
}

// Addr is the main listener's address (after Start).
func (a *App) Addr() string { return a.main.Addr().String() }

// AdminAddr is the admin listener's address, or the main one when the admin API shares it.
func (a *App) AdminAddr() string {
	if a.admin != nil {
		return a.admin.Addr().String()
	}
	return a.Addr()
}
