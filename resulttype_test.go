package sentinel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// chargeReceipt is the result type of the tests' charges.
type chargeReceipt struct {
	ChargeID string    `json:"charge_id"`
	Amount   int       `json:"amount"`
	Note     string    `json:"note,omitempty"`
	At       time.Time `json:"at,omitzero"`
}

// uncertainThenReconciled leaves key reconciling and returns its token.
func uncertainThenReconciled(t *testing.T, c *sentinel.Client, key string) int64 {
	t.Helper()
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, key, func(context.Context) (chargeReceipt, error) { return chargeReceipt{}, errors.New("provider timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := c.Reconcile(ctx, key)
	require.NoError(t, err)
	return ex.Token
}

// Issue 25.3: the declared type of a key space refuses an operator's value
// with a typo, a missing member or a wrong type, naming the JSON path of
// the first error, and writes nothing; a correct value is stored and the
// caller gets it.
func TestResultTypeChecksOperatorValues(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	require.NoError(t, sentinel.RegisterResultType[chargeReceipt](ctx, c, "charge-"))
	require.NoError(t, sentinel.RegisterResultType[chargeReceipt](ctx, c, "charge-"), "a repeated declaration")

	rt, err := c.ResultType(ctx, "charge-1")
	require.NoError(t, err)
	require.Equal(t, "charge-", rt.Prefix)
	require.Equal(t, "sentinel_test.chargeReceipt", rt.Name)
	require.Contains(t, string(rt.Schema), `"charge_id"`)
	_, err = c.ResultType(ctx, "refund-1")
	require.ErrorIs(t, err, sentinel.ErrNotFound)

	tok := uncertainThenReconciled(t, c, "charge-1")
	for _, tc := range []struct{ value, path, reason string }{
		{`{"chargeid":"ch_1","amount":500}`, "$.chargeid", "unknown member"},
		{`{"amount":500}`, "$.charge_id", "missing"},
		{`{"charge_id":"ch_1","amount":"500"}`, "$.amount", "want integer"},
		{`null`, "$", "want object"},
	} {
		err := c.ForceComplete(ctx, "charge-1", json.RawMessage(tc.value), sentinel.WithToken(tok))
		var te *sentinel.ResultTypeError
		require.ErrorAs(t, err, &te, tc.value)
		require.ErrorIs(t, err, sentinel.ErrResultType)
		require.Equal(t, tc.path, te.Path, tc.value)
		require.Contains(t, te.Reason, tc.reason, tc.value)
		require.Equal(t, "charge-", te.Prefix)
		ex, err := c.Inspect(ctx, "charge-1")
		require.NoError(t, err)
		require.Equal(t, sentinel.StateReconciling, ex.State, "a refused value was written")
	}
	require.NoError(t, c.ForceComplete(ctx, "charge-1", json.RawMessage(`{"charge_id":"ch_1","amount":500}`), sentinel.WithToken(tok)))
	res, err := sentinel.Once(ctx, c, "charge-1", func(context.Context) (chargeReceipt, error) { return chargeReceipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, chargeReceipt{ChargeID: "ch_1", Amount: 500}, res.Value)

	// The longest prefix wins; other namespaces are not covered.
	type special struct {
		Code string `json:"code"`
	}
	require.NoError(t, sentinel.RegisterResultType[special](ctx, c, "charge-special-"))
	rt, err = c.ResultType(ctx, "charge-special-9")
	require.NoError(t, err)
	require.Equal(t, "charge-special-", rt.Prefix)
	_, err = c.ResultType(ctx, "charge-1", sentinel.WithNamespace("other"))
	require.ErrorIs(t, err, sentinel.ErrNotFound)

	// Bad declarations.
	require.ErrorIs(t, sentinel.RegisterResultType[chargeReceipt](ctx, c, ""), sentinel.ErrInvalid)
	require.ErrorIs(t, sentinel.RegisterResultType[chargeReceipt](ctx, c, "idem"), sentinel.ErrInvalid)
	require.ErrorIs(t, sentinel.RegisterResultType[chargeReceipt](ctx, c, "idempotency:7:"), sentinel.ErrInvalid)
	require.ErrorIs(t, sentinel.RegisterResultType[chan int](ctx, c, "ch-"), sentinel.ErrInvalid)
	require.ErrorIs(t, sentinel.RegisterResultType[chargeReceipt](ctx, c, "x-", sentinel.WithTTL(time.Second)), sentinel.ErrInvalid)
}

// Issue 25.3: without a declared type, an operator's value that does not
// fit the caller's type is an error for the caller, never Cached with a
// zero value and a nil error; a value fn stored replays as before
// (unknown members ignored); SetResult replaces the operator's value.
func TestOperatorValueReplaysStrictly(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tok := uncertainThenReconciled(t, c, "pay-1")
	require.NoError(t, c.ForceComplete(ctx, "pay-1", json.RawMessage(`{"chargeid":"ch_1","amount":500}`), sentinel.WithToken(tok)))
	ex, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	require.True(t, ex.ResultByOperator)

	res, err := sentinel.Once(ctx, c, "pay-1", func(context.Context) (chargeReceipt, error) { return chargeReceipt{}, errors.New("must not run") })
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.ErrorIs(t, err, sentinel.ErrResultType)
	var te *sentinel.ResultTypeError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "$.chargeid", te.Path)
	require.Equal(t, chargeReceipt{}, res.Value)

	// A missing required member and a null are refused too; a caller
	// decoding into a map or json.RawMessage gets the value.
	for _, v := range []string{`{"charge_id":"ch_1"}`, `null`} {
		require.NoError(t, c.SetResult(ctx, "pay-1", json.RawMessage(v)))
		_, err = sentinel.Once(ctx, c, "pay-1", func(context.Context) (chargeReceipt, error) { return chargeReceipt{}, nil })
		require.ErrorIs(t, err, sentinel.ErrResult, v)
	}
	raw, err := sentinel.Once(ctx, c, "pay-1", func(context.Context) (json.RawMessage, error) { return nil, nil })
	require.NoError(t, err)
	require.JSONEq(t, `null`, string(raw.Value))
	ptr, err := sentinel.Once(ctx, c, "pay-1", func(context.Context) (*chargeReceipt, error) { return nil, nil })
	require.NoError(t, err, "null is a *chargeReceipt")
	require.Nil(t, ptr.Value)

	// The operator repairs it with SetResult; the caller gets it.
	require.NoError(t, c.SetResult(ctx, "pay-1", json.RawMessage(`{"charge_id":"ch_1","amount":500}`), sentinel.WithToken(tok)))
	res, err = sentinel.Once(ctx, c, "pay-1", func(context.Context) (chargeReceipt, error) { return chargeReceipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, chargeReceipt{ChargeID: "ch_1", Amount: 500}, res.Value)

	// fn's own value replays as before: an older reader with fewer
	// fields decodes it, unknown members and all; SetResult refuses it.
	type v2 struct {
		ChargeID string `json:"charge_id"`
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
	_, err = sentinel.Once(ctx, c, "pay-2", func(context.Context) (v2, error) { return v2{"ch_2", 700, "EUR"}, nil })
	require.NoError(t, err)
	old, err := sentinel.Once(ctx, c, "pay-2", func(context.Context) (chargeReceipt, error) { return chargeReceipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, chargeReceipt{ChargeID: "ch_2", Amount: 700}, old.Value)
	require.ErrorIs(t, c.SetResult(ctx, "pay-2", json.RawMessage(`{}`)), sentinel.ErrWrongState)
}

func TestResultTypeShape(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	type line struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	type order struct {
		ID    string            `json:"id"`
		Lines []line            `json:"lines"`
		Tags  map[string]string `json:"tags,omitempty"`
		At    time.Time         `json:"at"`
		Note  *string           `json:"note,omitempty"`
	}
	require.NoError(t, sentinel.RegisterResultType[order](ctx, c, "order-"))
	rt, err := c.ResultType(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, `{"id": string, "lines": [{"sku": string, "qty": integer}, ...], "tags"?: {string: string}, "at": string (date-time), "note"?: string}`, rt.Shape())
	require.NoError(t, sentinel.RegisterResultType[*chargeReceipt](ctx, c, "ptr-"))
	rt, err = c.ResultType(ctx, "ptr-1")
	require.NoError(t, err)
	require.Equal(t, `null | {"charge_id": string, "amount": integer, "note"?: string, "at"?: string (date-time)}`, rt.Shape())
}

// The application declares the type of its charges once; an operator's
// value with a typo is then refused before it is stored, with the JSON
// path of the error, and the expected shape can be shown.
func ExampleRegisterResultType() {
	client, done := exampleClient("example_result_type")
	defer done()
	ctx := context.Background()

	type Receipt struct {
		ChargeID string `json:"charge_id"`
		Amount   int    `json:"amount"`
	}
	if err := sentinel.RegisterResultType[Receipt](ctx, client, "charge-"); err != nil {
		fmt.Println("error:", err)
		return
	}
	rt, err := client.ResultType(ctx, "charge-1042")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(rt.Shape())

	// An uncertain key, reconciled by an operator who types a value.
	_, _ = sentinel.Once(ctx, client, "charge-1042", func(context.Context) (Receipt, error) {
		return Receipt{}, errors.New("card network: read timeout")
	})
	rec, _ := client.Reconcile(ctx, "charge-1042")
	err = client.ForceComplete(ctx, "charge-1042", json.RawMessage(`{"chargeid":"ch_1","amount":4200}`), sentinel.WithToken(rec.Token))
	var te *sentinel.ResultTypeError
	if errors.As(err, &te) {
		fmt.Println("refused at", te.Path)
	}
	err = client.ForceComplete(ctx, "charge-1042", json.RawMessage(`{"charge_id":"ch_1","amount":4200}`), sentinel.WithToken(rec.Token))
	fmt.Println("stored:", err == nil)
	res, _ := sentinel.Once(ctx, client, "charge-1042", func(context.Context) (Receipt, error) { return Receipt{}, nil })
	fmt.Printf("%+v cached=%v\n", res.Value, res.Cached)
	// Output:
	// {"charge_id": string, "amount": integer}
	// refused at $.chargeid
	// stored: true
	// {ChargeID:ch_1 Amount:4200} cached=true
}

// A member of a sized Go number type refuses an operator's value beyond
// what encoding/json decodes into it (JSON Schema's integer has no width):
// 256 for a uint8, -1 for a uint, 1e39 for a float32. Nothing is written;
// the bounds themselves are stored and replayed.
func TestResultTypeNumberWidths(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	type meter struct {
		Level int8    `json:"level"`
		Pct   uint8   `json:"pct"`
		Count uint    `json:"count"`
		Code  int32   `json:"code"`
		Big   int64   `json:"big"`
		Ratio float32 `json:"ratio"`
	}
	require.NoError(t, sentinel.RegisterResultType[meter](ctx, c, "meter-"))
	tok := uncertainThenReconciled(t, c, "meter-1")
	for _, tc := range []struct{ value, path string }{
		{`{"level":128,"pct":0,"count":0,"code":0,"big":0,"ratio":0}`, "$.level"},
		{`{"level":-129,"pct":0,"count":0,"code":0,"big":0,"ratio":0}`, "$.level"},
		{`{"level":0,"pct":256,"count":0,"code":0,"big":0,"ratio":0}`, "$.pct"},
		{`{"level":0,"pct":0,"count":-1,"code":0,"big":0,"ratio":0}`, "$.count"},
		{`{"level":0,"pct":0,"count":0,"code":2147483648,"big":0,"ratio":0}`, "$.code"},
		{`{"level":0,"pct":0,"count":0,"code":0,"big":9223372036854775808,"ratio":0}`, "$.big"},
		{`{"level":0,"pct":0,"count":0,"code":0,"big":0,"ratio":1e39}`, "$.ratio"},
	} {
		var decoded meter
		require.Error(t, json.Unmarshal([]byte(tc.value), &decoded), "encoding/json takes %s", tc.value)
		err := c.ForceComplete(ctx, "meter-1", json.RawMessage(tc.value), sentinel.WithToken(tok))
		var te *sentinel.ResultTypeError
		require.ErrorAs(t, err, &te, tc.value)
		require.Equal(t, tc.path, te.Path, tc.value)
		ex, err := c.Inspect(ctx, "meter-1")
		require.NoError(t, err)
		require.Equal(t, sentinel.StateReconciling, ex.State, "a refused value was written")
	}
	edge := `{"level":-128,"pct":255,"count":18446744073709551615,"code":-2147483648,"big":-9223372036854775808,"ratio":3.4028234663852886e38}`
	require.NoError(t, c.ForceComplete(ctx, "meter-1", json.RawMessage(edge), sentinel.WithToken(tok)))
	res, err := sentinel.Once(ctx, c, "meter-1", func(context.Context) (meter, error) { return meter{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, meter{Level: -128, Pct: 255, Count: 18446744073709551615, Code: -2147483648, Big: -9223372036854775808, Ratio: 3.4028234663852886e38}, res.Value)
}
