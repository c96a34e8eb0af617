package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MinTokenBits is the least estimated strength New accepts for an operator
// token: 128 bits, for example 32 hex characters (`openssl rand -hex 32`
// gives 64) or 22 base64 characters.
const MinTokenBits = 128

// ErrWeakToken is returned (wrapped) by New for an operator token weaker
// than MinTokenBits.
var ErrWeakToken = errors.New("console: operator token too weak")

// tokenBits estimates the strength of a token in bits, assuming it was
// drawn at random from the smallest usual alphabet holding all its
// characters (digits, hex, lower-case alphanumerics, alphanumerics, base64,
// printable ASCII). A token that repeats a shorter one, or whose characters
// are far less varied than a random draw's, counts as no stronger than
// its distinct characters allow.
func tokenBits(tok string) float64 {
	n := utf8.RuneCountInString(tok)
	if n == 0 {
		return 0
	}
	var lowerHex, upperHex, lower, upper, b64, other bool
	counts := map[rune]int{}
	for _, r := range tok {
		counts[r]++
		switch {
		case r >= '0' && r <= '9':
		case r >= 'a' && r <= 'f':
			lowerHex = true
		case r >= 'A' && r <= 'F':
			upperHex = true
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case r == '-' || r == '_' || r == '+' || r == '/' || r == '=':
			b64 = true
		default:
			other = true
		}
	}
	var alphabet float64
	switch {
	case other:
		alphabet = 95
	case b64 || (lower || lowerHex) && (upper || upperHex):
		alphabet = 64
	case lower:
		alphabet = 36
	case upper:
		alphabet = 36
	case lowerHex || upperHex:
		alphabet = 16
	default:
		alphabet = 10
	}
	bits := float64(n) * math.Log2(alphabet)

	// A repetition of a shorter token is as strong as that token.
	rs := []rune(tok)
	for p := 1; p <= n/2; p++ {
		if n%p != 0 {
			continue
		}
		rep := true
		for i := p; i < n && rep; i++ {
			rep = rs[i] == rs[i-p]
		}
		if rep {
			bits = math.Min(bits, float64(p)*math.Log2(alphabet))
			break
		}
	}
	// Shannon entropy of the characters as drawn: a random token's is close
	// to log2(alphabet) per character (about 3.5 of 4 bits for 32 hex
	// characters); "aaaa…" or "abab…" are far below. Below half of the
	// alphabet's, count the characters at their observed entropy.
	var h float64
	for _, c := range counts {
		p := float64(c) / float64(n)
		h -= p * math.Log2(p)
	}
	if h < math.Log2(alphabet)/2 {
		bits = math.Min(bits, float64(n)*h)
	}
	return bits
}

// checkToken refuses a token weaker than MinTokenBits, saying how to make
// one.
func checkToken(what, tok string) error {
	if b := tokenBits(tok); b < MinTokenBits {
		return fmt.Errorf("%w: %s carries about %.0f bits, at least %d are needed: make one with `openssl rand -hex 32`",
			ErrWeakToken, what, b, MinTokenBits)
	}
	return nil
}

// operator is one configured token: a named operator's (Options.Operators)
// or the shared one (Options.OperatorToken, name "").
type operator struct {
	name string
	sum  [32]byte // sha256 of the token
}

// checkOperatorName refuses names that cannot be recorded as they are.
func checkOperatorName(name string) error {
	if name == "" || len(name) > 200 || !utf8.ValidString(name) {
		return fmt.Errorf("console: operator name %q: give 1 to 200 bytes of UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("console: operator name %q: no control characters", name)
		}
	}
	return nil
}

// newOperators validates the configured tokens: each strong, no two alike.
func newOperators(shared string, named map[string]string) ([]operator, error) {
	var ops []operator
	if shared != "" {
		if err := checkToken("the operator token", shared); err != nil {
			return nil, err
		}
		ops = append(ops, operator{sum: sha256.Sum256([]byte(shared))})
	}
	names := make([]string, 0, len(named))
	for n := range named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := checkOperatorName(n); err != nil {
			return nil, err
		}
		if err := checkToken(fmt.Sprintf("the token of operator %q", n), named[n]); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(named[n]))
		for _, o := range ops {
			if o.sum == sum {
				return nil, fmt.Errorf("console: operator %q has the same token as another: give every operator a token of their own", n)
			}
		}
		ops = append(ops, operator{name: n, sum: sum})
	}
	return ops, nil
}

// operatorOf finds the operator a submitted token belongs to, comparing in
// constant time with every configured token (over SHA-256 digests, so the
// lengths leak nothing either). named is false for the shared token.
func (cs *Console) operatorOf(got string) (name string, named, ok bool) {
	if got == "" {
		return "", false, false
	}
	sum := sha256.Sum256([]byte(got))
	for _, o := range cs.ops {
		if subtle.ConstantTimeCompare(sum[:], o.sum[:]) == 1 {
			name, named, ok = o.name, o.name != "", true
		}
	}
	return name, named, ok
}

// checkOperatorToken reports whether got is one of the configured tokens.
func (cs *Console) checkOperatorToken(got string) bool {
	_, _, ok := cs.operatorOf(got)
	return ok
}

// Values of the "operator_auth" metadata an action records beside
// "operator_name": how the console knows the name.
const (
	authToken    = "token"         // the operator's own token (Options.Operators)
	authApp      = "application"   // Options.Operator, the embedding application's authentication
	authDeclared = "self-declared" // typed in the form under the shared token
)

// actor decides who is acting, from the request's token and form: the
// name of the operator's own token, else Options.Operator's answer, else
// the name typed in the form (self-declared: the shared token cannot tell
// operators apart).
func (cs *Console) actor(r *http.Request, tok, typed string) (name, auth string, ok bool) {
	if !cs.checkOperatorToken(tok) {
		return "", "", false
	}
	name, named, _ := cs.operatorOf(tok)
	switch {
	case named:
		return name, authToken, true
	case cs.opts.Operator != nil:
		return strings.TrimSpace(cs.opts.Operator(r)), authApp, true
	default:
		return strings.TrimSpace(typed), authDeclared, true
	}
}
