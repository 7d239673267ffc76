package baseline

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"time"
)

const usage = `sluice-baseline: the reference servers of sluice-bench's overhead scenario

  sluice-baseline frames       [--listen ADDR] [--model NAME]
  sluice-baseline reverseproxy --upstream URL [--listen ADDR]
  sluice-baseline pd           --prefill URL --bootstrap-port N --decode URL [--listen ADDR]

Each prints "listening http://HOST:PORT" on stdout once it accepts connections, and serves until
interrupted.
`

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("sluice-baseline "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	model := fs.String("model", "sim-model", "frames: the served model id")
	upstream := fs.String("upstream", "", "reverseproxy: the engine's base URL")
	prefill := fs.String("prefill", "", "pd: the prefill engine's base URL")
	decode := fs.String("decode", "", "pd: the decode engine's base URL")
	bootstrapPort := fs.Int("bootstrap-port", 8998, "pd: the prefill engine's bootstrap port")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address too (to profile a baseline as the gateway is)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var h http.Handler
	switch args[0] {
	case "frames":
		h = &Frames{Model: *model}
	case "reverseproxy":
		u, err := parseURL("upstream", *upstream)
		if err != nil {
			fmt.Fprintln(stderr, "sluice-baseline:", err)
			return 2
		}
		h = NewReverseProxy(u)
	case "pd":
		p, err1 := parseURL("prefill", *prefill)
		d, err2 := parseURL("decode", *decode)
		if err := errors.Join(err1, err2); err != nil {
			fmt.Fprintln(stderr, "sluice-baseline:", err)
			return 2
		}
		h = NewPDProxy(p, d, *bootstrapPort)
	default:
		fmt.Fprintf(stderr, "sluice-baseline: unknown server %q\n\n%s", args[0], usage)
		return 2
	}
	if *pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		errc := make(chan error, 1)
		pctx, cancel := context.WithCancel(ctx)
		go func() { errc <- Serve(pctx, *pprofAddr, mux, nil) }()
		defer func() {
			cancel()
			if err := <-errc; err != nil {
				fmt.Fprintln(stderr, "sluice-baseline: pprof:", err)
			}
		}()
	}
	if err := Serve(ctx, *listen, h, func(addr string) { fmt.Fprintf(stdout, "listening http://%s\n", addr) }); err != nil {
		fmt.Fprintln(stderr, "sluice-baseline:", err)
		return 1
	}
	return 0
}

func parseURL(name, s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("--%s is required", name)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("--%s %q: not a base URL", name, s)
	}
	return u, nil
}

// Serve serves h on addr until ctx ends, then shuts the server down. ready gets the bound address.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(addr string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close() // held streams do not end by themselves
	}
	if serr := <-errc; err == nil && !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	return err
}
