package sentinel_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sentinel-coordination/sentinel"
)

// cardNetwork stands in for a card API that deduplicates charges by the
// idempotency key it is given: a repeated key returns the first charge.
type cardNetwork struct{ charges map[string]string }

func (n *cardNetwork) charge(idempotencyKey string, amount int) (string, error) {
	if id, ok := n.charges[idempotencyKey]; ok {
		return id, nil // a repeat: the same charge, not a new one
	}
	id := fmt.Sprintf("ch_%d", len(n.charges)+1)
	n.charges[idempotencyKey] = id
	return id, nil
}

// WithRerun for a charge the card network deduplicates by EffectKey: the
// first attempt charges and then fails before its outcome is stored (a
// timeout, a crash); the next call runs fn again as attempt 2 and gets the
// same charge from the network, instead of leaving the key uncertain.
func ExampleWithRerun() {
	client, done := exampleClient("example_rerun")
	defer done()
	ctx := context.Background()
	network := &cardNetwork{charges: map[string]string{}}

	pay := func() {
		res, err := sentinel.Once(ctx, client, "payment-order-789",
			func(ctx context.Context) (string, error) {
				id, err := network.charge(sentinel.EffectKey(ctx), 9900)
				if err != nil {
					return "", err
				}
				fmt.Printf("attempt %d: the network answered %s\n", sentinel.Attempt(ctx), id)
				if sentinel.Attempt(ctx) == 1 {
					return "", errors.New("timed out reading the answer") // outcome unknown to us
				}
				return id, nil
			},
			sentinel.WithRerun(3))
		switch {
		case errors.Is(err, sentinel.ErrUncertain):
			fmt.Println("this call: outcome unknown; the next call re-runs it")
		case err != nil:
			fmt.Println("error:", err)
		default:
			fmt.Printf("paid: %s (cached: %v)\n", res.Value, res.Cached)
		}
	}
	pay()
	pay()
	pay()
	fmt.Println("charges at the network:", len(network.charges))
	// Output:
	// attempt 1: the network answered ch_1
	// this call: outcome unknown; the next call re-runs it
	// attempt 2: the network answered ch_1
	// paid: ch_1 (cached: false)
	// paid: ch_1 (cached: true)
	// charges at the network: 1
}
