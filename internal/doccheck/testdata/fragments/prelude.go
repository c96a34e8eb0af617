// Package fragments is the prelude of TestFragmentsBuild: it is copied
// beside the Go fragments of each Markdown file (package renamed), and
// declares what they use without declaring it. Declare here only what the
// reader has in scope when the snippet starts, never a name of the
// library: a snippet that calls a library name that does not exist must
// fail. Each fragment may redeclare any of these (:= shadows them).
package fragments

import (
	"context"
	"database/sql"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// The variables most snippets start from.
var (
	ctx    context.Context
	client *sentinel.Client
	pool   *pgxpool.Pool
	db     *sql.DB
	lease  *sentinel.Lease
	key    string
	url    string // the database's URL

	// In a handler.
	w   http.ResponseWriter
	r   *http.Request
	mux *http.ServeMux
)

// The reader's own code the snippets call: a payment service that charges
// an order, and its helpers. Their bodies do not matter.
type (
	Receipt struct{ ID string }
	Order   struct{ ID string }
)

var (
	order           Order
	orderID         string
	receipt         Receipt
	amount          int64
	ErrCardDeclined = errors.New("card declined")
)

func chargeCard(context.Context, Order) (Receipt, error)   { return Receipt{}, nil }
func validateAndPrice(context.Context, Order) error        { return nil }
func mail(context.Context) (string, error)                 { return "", nil }
func use(...any)                                           {}
func accountID(*http.Request) string                       { return "" }
func process(context.Context, int64)                       {}
func buildReport(context.Context, int64) error             { return nil }
func printJob(context.Context, int64)                      {}
func yourAuth(h http.Handler) http.Handler                 { return h }
func chargeHandlerFunc(http.ResponseWriter, *http.Request) {}
func insertOrder(context.Context, *sql.Tx, Order) error    { return nil }
func gatewayOption(string) func()                          { return nil }
func (paymentGateway) IdempotencyKey(k string) func()      { return gatewayOption(k) }
func (paymentGateway) Charge(context.Context, Order, ...func()) (Receipt, error) {
	return Receipt{}, nil
}
func (paymentProvider) Charge(context.Context, string, int64) (Receipt, error) {
	return Receipt{}, nil
}

type (
	paymentGateway  struct{}
	paymentProvider struct{ ErrTimeout, ErrUnreachable error }
	sqlcQueries     struct{}
	sqlcTx          struct{ tx *sql.Tx }
)

func (sqlcQueries) WithTx(tx *sql.Tx) sqlcTx                    { return sqlcTx{tx} }
func (q sqlcTx) InsertOrder(ctx context.Context, o Order) error { return insertOrder(ctx, q.tx, o) }

var (
	gateway       paymentGateway                                               // once.md: the card gateway
	psp           = paymentProvider{errors.New("timeout"), errors.New("down")} // runbook-payments.md: the payment provider
	queries       sqlcQueries                                                  // once.md: sqlc's generated queries
	chargeHandler = http.HandlerFunc(chargeHandlerFunc)
	term          int64  // election.md: the scheduler's term, OnElected's argument
	id            string // leases.md: the invoice's id
	cursor        string // operating.md: the previous page's cursor

	// leases.md: two clients, the dispatcher's and the worker's.
	dispatcher, worker *sentinel.Client

	// operating.md: the operators' tokens.
	adaToken, graceToken string
)
