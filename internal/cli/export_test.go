package cli

import (
	"context"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
)

// For the external tests against a live gateway (cli_test): they import tests/testenv, which the
// package's own tests cannot without lifting cli a floor above it.

func BearerInterceptor(key string) connect.UnaryInterceptorFunc { return bearerInterceptor(key) }

// RunTopTerm is `sluice top` drawing count frames on a terminal.
func RunTopTerm(ctx context.Context, c adminv1connect.AdminServiceClient, w io.Writer, server string, interval time.Duration, count int) error {
	return runTop(ctx, c, w, topOptions{server: server, interval: interval, count: count, term: true})
}
