package console

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MinTokenBits is the least strength New accepts for an operator token:
// 128 bits as a random draw from the token's alphabet (32 hex characters,
// 26 of base32, 22 of base64), from a token that looks drawn, not made
// (see NewToken and checkToken).
const MinTokenBits = 128

// ErrWeakToken is returned (wrapped) by New for an operator token weaker
// than MinTokenBits, or one that looks made of words or patterns.
var ErrWeakToken = errors.New("console: operator token too weak")

// NewToken returns a new operator token: 32 bytes from crypto/rand,
// base64url-encoded without padding (43 characters, 256 bits). It always
// passes the check New applies (a draw that would not is drawn again,
// which costs far less than a millionth of a bit). `sentinel serve
// --new-token` prints one.
func NewToken() string {
	for {
		tok := base64.RawURLEncoding.EncodeToString(randomBytes(32))
		if judgeToken(tok).err == "" {
			return tok
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// makeTokenHint is how the errors say to make a good token.
const makeTokenHint = "make one with `sentinel serve --new-token` (or `openssl rand -hex 32`)"

// checkToken refuses a token weaker than MinTokenBits or one that does
// not look random, saying how to make a good one.
func checkToken(what, tok string) error {
	if j := judgeToken(tok); j.err != "" {
		return fmt.Errorf("%w: %s %s: %s", ErrWeakToken, what, j.err, makeTokenHint)
	}
	return nil
}

// A token is judged as a draw from a standard alphabet (the smallest of
// tokenAlphabets holding all its characters): it must carry MinTokenBits
// as such a draw, and it must not look made. "Looks made" is decided by a
// likelihood ratio: madeModel gives every string a probability under a
// model of what people type (English words, their capitals and
// separators, repeated characters, runs like "abcd" or "1234", keyboard
// walks, runs of one class); a token that model finds maxStructureBits
// bits likelier than a uniform draw from its alphabet is refused. The
// model is a probability distribution over the alphabet at each position,
// so for a truly random token the ratio has mean 1 and (Markov's
// inequality) reaches 2^maxStructureBits with probability at most
// 2^-maxStructureBits: about one random token in a billion is refused,
// while "correct-horse-battery-staple-2024" scores about 2^90.
const maxStructureBits = 30

// tokenAlphabets are the standard alphabets of random tokens, smallest
// first.
var tokenAlphabets = func() []tokenAlphabet {
	const (
		digits = "0123456789"
		lower  = "abcdefghijklmnopqrstuvwxyz"
		upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	)
	var printable strings.Builder
	for c := byte('!'); c <= '~'; c++ {
		printable.WriteByte(c)
	}
	return []tokenAlphabet{
		newAlphabet("hex", digits+"abcdef"), newAlphabet("hex", digits+"ABCDEF"),
		newAlphabet("base32", upper+"234567"), newAlphabet("base32", lower+"234567"),
		newAlphabet("base36", digits+lower), newAlphabet("base36", digits+upper),
		newAlphabet("base62", digits+lower+upper),
		newAlphabet("base64url", digits+lower+upper+"-_"), newAlphabet("base64", digits+lower+upper+"+/"),
		newAlphabet("printable ASCII", printable.String()),
	}
}()

type tokenAlphabet struct {
	name    string
	chars   string
	has     [128]bool
	inClass [4]int // how many characters of each class (classOf)
}

func newAlphabet(name, chars string) tokenAlphabet {
	a := tokenAlphabet{name: name, chars: chars}
	for i := 0; i < len(chars); i++ {
		a.has[chars[i]] = true
		a.inClass[classOf(chars[i])]++
	}
	return a
}

// judgement is what judgeToken found: err says why a token is refused
// ("" if it is not).
type judgement struct {
	alphabet  string
	bits      float64 // as a random draw from the alphabet (a repeated token: its period's)
	structure float64 // log2 of madeModel's probability over the uniform draw's
	err       string
}

func judgeToken(tok string) judgement {
	body := strings.TrimRight(tok, "=") // base32/base64 padding carries nothing
	var a *tokenAlphabet
	for i := range tokenAlphabets {
		if containsOnly(&tokenAlphabets[i], body) {
			a = &tokenAlphabets[i]
			break
		}
	}
	if body == "" || a == nil {
		return judgement{err: "has characters no random token has (spaces, non-ASCII) or none at all"}
	}
	n := len(body)
	j := judgement{alphabet: a.name, bits: float64(n) * math.Log2(float64(len(a.chars)))}
	// A repetition of a shorter token is as strong as that token.
	for p := 1; p <= n/2; p++ {
		if n%p == 0 && strings.Repeat(body[:p], n/p) == body {
			j.bits = float64(p) * math.Log2(float64(len(a.chars)))
			break
		}
	}
	j.structure = structureBits(a, body)
	switch {
	case uuidShape(body):
		j.err = "is a UUID, which carries at most 122 random bits"
	case j.bits < MinTokenBits:
		j.err = fmt.Sprintf("carries about %.0f bits as a random draw from its alphabet (%s), at least %d are needed", j.bits, a.name, MinTokenBits)
	case j.structure >= maxStructureBits:
		j.err = "looks made, not drawn at random: words, repeated characters, sequences, keyboard walks or dates"
	}
	return j
}

func containsOnly(a *tokenAlphabet, s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 128 || !a.has[s[i]] {
			return false
		}
	}
	return true
}

// uuidShape reports whether s is written as a UUID (8-4-4-4-12 hex).
func uuidShape(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !isHex(c) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// structureBits is log2 of the made-string model's probability of s over
// the probability of s as a uniform draw from a. The model is a mixture
// of styles (a phrase, digits and runs of one class, a sequence, a
// keyboard walk, repeats), one chosen for the whole token: each predicts
// every character from the ones before it, as a mixture of the
// components of charModels weighted by its style, plus a tenth of the
// uniform draw. Each is a probability distribution over a at every
// position, and so is their mixture (which the bound of maxStructureBits
// needs).
func structureBits(a *tokenAlphabet, s string) float64 {
	u := 1 / float64(len(a.chars))
	var score [len(styles)]float64 // log2 of each style's ratio to the uniform draw
	var node *trieNode             // where the letters so far stand in wordTrie
	for i := 0; i < len(s); i++ {
		d := charModels(a, s, i, node)
		if l := letterIndex(s[i]); l >= 0 {
			node = wordStep(node, l)
		} else {
			node = nil
		}
		for k, w := range styles {
			q := 0.10 * u
			for m := range d {
				q += w[m] * d[m]
			}
			score[k] += math.Log2(q / u)
		}
	}
	// log2 of the mean of 2^score over the styles, without overflow.
	hi := score[0]
	for _, x := range score {
		hi = max(hi, x)
	}
	var sum float64
	for _, x := range score {
		sum += math.Exp2(x - hi)
	}
	return hi + math.Log2(sum/float64(len(styles)))
}

// The components of the made-string model: what each predicts for the
// next character.
const (
	modelWord     = iota // common words (wordProb)
	modelEnglish         // English letters (englishProb)
	modelRepeat          // the previous character again
	modelNext            // the one after it ("abcd", "1234")
	modelPrev            // the one before it ("dcba", "4321")
	modelKeyboard        // a key next to it (qwerty, 1qaz)
	modelClass           // any of its class (the digits of a date)
	modelCopy            // what followed the last earlier occurrence of the two characters before (a repeated word)
	nModels
)

// styles weigh the components; each row sums to 0.9 (the uniform draw has
// the last tenth).
var styles = [...][nModels]float64{
	{0.55, 0.20, 0.02, 0.02, 0.02, 0.02, 0.05, 0.02}, // common words
	{0.15, 0.55, 0.03, 0.02, 0.02, 0.02, 0.05, 0.06}, // English-like words
	{0.05, 0.05, 0.08, 0.05, 0.05, 0.02, 0.55, 0.05}, // digits, runs of one class
	{0.02, 0.03, 0.05, 0.45, 0.20, 0.05, 0.05, 0.05}, // a sequence
	{0.02, 0.03, 0.05, 0.05, 0.05, 0.55, 0.10, 0.05}, // a keyboard walk
	{0.02, 0.03, 0.35, 0.05, 0.05, 0.05, 0.10, 0.25}, // repeats
}

// charModels returns the probability of s[i] under each component, given
// s[:i]. A component that has no candidate in a (no character after 'z'
// in hex) predicts the uniform draw.
func charModels(a *tokenAlphabet, s string, i int, node *trieNode) [nModels]float64 {
	u := 1 / float64(len(a.chars))
	var d [nModels]float64
	c := s[i]
	prev := -1
	if i > 0 {
		prev = int(s[i-1])
	}
	d[modelEnglish] = englishProb(a, prev, c)
	d[modelWord] = wordProb(a, prev, node, c)
	if prev < 0 {
		for m := modelRepeat; m < nModels; m++ {
			d[m] = u
		}
		return d
	}
	p := byte(prev)
	hit := func(ok, is bool) float64 {
		switch {
		case !ok:
			return u
		case is:
			return 1
		}
		return 0
	}
	d[modelRepeat] = hit(true, c == p)
	d[modelNext] = hit(p < 127 && a.has[p+1], c == p+1)
	d[modelPrev] = hit(p > 0 && a.has[p-1], c == p-1)
	// Keyboard neighbours, either case where a has it.
	var keys []byte
	for _, k := range []byte(keyNeighbours[lowerByte(p)]) {
		for _, v := range []byte{k, upperByte(k)} {
			if a.has[v] && bytes.IndexByte(keys, v) < 0 {
				keys = append(keys, v)
			}
		}
	}
	switch {
	case len(keys) == 0:
		d[modelKeyboard] = u
	case bytes.IndexByte(keys, c) >= 0:
		d[modelKeyboard] = 1 / float64(len(keys))
	}
	// Any character of prev's class.
	if classOf(c) == classOf(p) {
		d[modelClass] = 1 / float64(a.inClass[classOf(p)])
	}
	// What followed the two characters before, where they last occurred.
	d[modelCopy] = u
	if i >= 2 {
		for j := i - 1; j >= 2; j-- {
			if s[j-2] == s[i-2] && s[j-1] == s[i-1] {
				d[modelCopy] = hit(true, c == s[j])
				break
			}
		}
	}
	return d
}

// Character classes.
const (
	classDigit = iota
	classLower
	classUpper
	classOther
)

func classOf(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return classDigit
	case c >= 'a' && c <= 'z':
		return classLower
	case c >= 'A' && c <= 'Z':
		return classUpper
	}
	return classOther
}

// englishProb is the probability, under a model of English words written
// with the characters of a, that c follows prev (-1: c comes first): after
// a letter mostly a letter, as English letters follow each other
// (englishPair), in the case of a word in lower case, Capitalized, or in
// CamelCase; between words a separator or digits.
func englishProb(a *tokenAlphabet, prev int, c byte) float64 {
	var counts [26]float64 // how often each letter comes next, case folded
	pl := -1               // prev as a letter 0..25
	if prev >= 0 && classOf(byte(prev)) == classLower {
		pl = prev - 'a'
	} else if prev >= 0 && classOf(byte(prev)) == classUpper {
		pl = prev - 'A'
	}
	var total float64
	for l := 0; l < 26; l++ {
		if !a.has['a'+l] && !a.has['A'+l] {
			continue
		}
		if pl >= 0 {
			counts[l] = float64(englishPair[pl][l]) + 1
		} else {
			counts[l] = float64(englishFirst[l]) + 1
		}
		total += counts[l]
	}
	nDigits, nOther := a.inClass[classDigit], a.inClass[classOther]
	letter := 0.7 // the chance the next character is a letter
	if pl >= 0 {
		letter = 0.85
	}
	switch {
	case total == 0:
		letter = 0
	case nDigits+nOther == 0:
		letter = 1
	}
	cc := classOf(c)
	if cc == classLower || cc == classUpper {
		l := int(c) - 'a'
		if cc == classUpper {
			l = int(c) - 'A'
		}
		if total == 0 || counts[l] == 0 {
			return 0
		}
		caseP := 1.0 // the chance of c's case, when a has both
		if a.has['a'+l] && a.has['A'+l] {
			lowerP := 0.5
			switch {
			case prev >= 0 && classOf(byte(prev)) == classLower:
				lowerP = 0.85 // a word goes on; CamelCase starts another
			case prev >= 0 && classOf(byte(prev)) == classUpper:
				lowerP = 0.6 // Capitalized, or ALL CAPS
			}
			if cc == classLower {
				caseP = lowerP
			} else {
				caseP = 1 - lowerP
			}
		}
		return letter * counts[l] / total * caseP
	}
	// Digits and separators between words, half each where a has both.
	digitP := 0.5
	switch {
	case nOther == 0:
		digitP = 1
	case nDigits == 0:
		digitP = 0
	}
	if cc == classDigit {
		return (1 - letter) * digitP / float64(nDigits)
	}
	return (1 - letter) * (1 - digitP) / float64(nOther)
}

// letterIndex is c's letter 0..25, either case, or -1.
func letterIndex(c byte) int {
	switch {
	case c >= 'a' && c <= 'z':
		return int(c - 'a')
	case c >= 'A' && c <= 'Z':
		return int(c - 'A')
	}
	return -1
}

// wordProb is the probability, under a model of common words written with
// the characters of a, that c follows prev (-1: c comes first), node being
// where the letters so far stand in wordTrie (nil: no word started): the
// letters that go on spelling a word, in its case; where a word may end,
// the first letter of another (lower or capital: CamelCase) or a
// separator or digit. The masses of characters a lacks are left out, and
// the rest scaled up to 1.
func wordProb(a *tokenAlphabet, prev int, node *trieNode, c byte) float64 {
	mass := func(x byte) float64 {
		lo := 0.5 // the chance of a lower-case letter
		if prev >= 0 {
			switch classOf(byte(prev)) {
			case classLower:
				lo = 0.9
			case classUpper:
				lo = 0.6
			}
		}
		var start, other float64 // a new word, a separator or digit
		var cont float64         // this letter going on with the word
		l := letterIndex(x)
		prevLetter := prev >= 0 && letterIndex(byte(prev)) >= 0
		switch {
		case !prevLetter:
			start, other = 0.7, 0.3
		case node == nil || node.total == 0:
			start, other = 0.6, 0.4
		default:
			if l >= 0 {
				cont = float64(node.below[l]) / float64(node.total)
			}
			end := float64(node.end) / float64(node.total)
			start, other = 0.6*end, 0.4*end
		}
		if l < 0 {
			return other
		}
		caseP := lo
		if classOf(x) == classUpper {
			caseP = 1 - lo
		}
		first := float64(wordTrie.below[l]) / float64(wordTrie.total)
		startCase := 0.5
		return cont*caseP + start*first*startCase
	}
	var nOther int
	var total float64
	for k := 0; k < len(a.chars); k++ {
		x := a.chars[k]
		if letterIndex(x) < 0 {
			nOther++
			continue
		}
		total += mass(x)
	}
	var otherMass float64
	if nOther > 0 {
		otherMass = mass('0') // the same for every non-letter
		total += otherMass
	}
	if total == 0 {
		return 1 / float64(len(a.chars))
	}
	if letterIndex(c) < 0 {
		return otherMass / float64(nOther) / total
	}
	return mass(c) / total
}

// keyboardRows are a QWERTY keyboard's rows, for keyboard walks.
var keyboardRows = []string{"1234567890-=", "qwertyuiop[]", "asdfghjkl;'", "zxcvbnm,./"}

// keyNeighbours[c] are the keys next to c (lower case): left, right, and
// the keys above and below.
var keyNeighbours = func() map[byte]string {
	m := map[byte]string{}
	add := func(c, d byte) {
		if !strings.ContainsRune(m[c], rune(d)) {
			m[c] += string(d)
		}
	}
	for r, row := range keyboardRows {
		for i := 0; i < len(row); i++ {
			if i > 0 {
				add(row[i], row[i-1])
			}
			if i+1 < len(row) {
				add(row[i], row[i+1])
			}
			for _, dr := range []int{-1, 1} {
				if r+dr < 0 || r+dr >= len(keyboardRows) {
					continue
				}
				other := keyboardRows[r+dr]
				for _, k := range []int{i - 1, i, i + 1} {
					if k >= 0 && k < len(other) {
						add(row[i], other[k])
					}
				}
			}
		}
	}
	return m
}()

func lowerByte(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func upperByte(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
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

// holdsToken reports whether text holds one of the configured tokens as
// a word (a token pasted into a name or reason field): such text is
// neither shown again nor recorded. Each word is compared as operatorOf
// compares, in constant time.
func (cs *Console) holdsToken(text string) bool {
	found := false
	for _, w := range strings.Fields(text) {
		if cs.checkOperatorToken(w) {
			found = true
		}
	}
	return found
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
