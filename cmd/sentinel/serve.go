package main

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel/console"
)

func (a *app) serveCmd() *cobra.Command {
	var (
		addr, token       string
		readOnly, anyAddr bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the reconciliation page (console) until interrupted",
		Long: `serve runs the reconciliation page: executions with uncertain ones first,
a key's history and evidence, leases, queues and elections, and the
reconcile / force-complete / reset actions, each guarded by the token the
operator saw. It listens on loopback by default; another address needs
--listen-any (put it behind your own authentication). Actions need the
operator token (--operator-token, default $SENTINEL_OPERATOR_TOKEN),
compared in constant time; --read-only offers no action. It prints the URL
it listens on, and stops on SIGINT or SIGTERM.`,
		Example: `  SENTINEL_OPERATOR_TOKEN=$(openssl rand -hex 16) sentinel serve
  sentinel serve --read-only --addr 127.0.0.1:8380 -n payments`,
		Args: args(0, 0),
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv("SENTINEL_OPERATOR_TOKEN")
			}
			if !anyAddr && !console.IsLoopback(addr) {
				return usageErr("--addr %s is not a loopback address: pass --listen-any to serve it beyond this machine", addr)
			}
			if !readOnly && token == "" {
				return usageErr("actions need an operator token: set SENTINEL_OPERATOR_TOKEN or --operator-token, or pass --read-only")
			}
			h, err := console.New(a.client, console.Options{OperatorToken: token, ReadOnly: readOnly})
			if err != nil {
				return err
			}
			return console.Serve(cmd.Context(), addr, h, func(l net.Addr) {
				fmt.Fprintf(cmd.OutOrStdout(), "listening on http://%s/\n", l)
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", console.DefaultAddr, "address to listen on (loopback unless --listen-any)")
	f.StringVar(&token, "operator-token", "", "token an operator must give for actions (default $SENTINEL_OPERATOR_TOKEN)")
	f.BoolVar(&readOnly, "read-only", false, "offer no action")
	f.BoolVar(&anyAddr, "listen-any", false, "allow a non-loopback --addr")
	return cmd
}
