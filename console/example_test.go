package console_test

import (
	"fmt"

	"github.com/sentinel-coordination/sentinel/console"
)

// An operator token for Options.OperatorToken or Options.Operators: 256
// random bits, base64url. `sentinel serve --new-token` prints one.
func ExampleNewToken() {
	tok := console.NewToken()
	fmt.Println(len(tok))
	// Output: 43
}
