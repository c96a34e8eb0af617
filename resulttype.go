package sentinel

// This file: Result types: RegisterResultType, Client.ResultType, the JSON Schema a key's result must match (reflectSchema, validate), and its shape as operators read it.

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/invopop/jsonschema"
	"github.com/jackc/pgx/v5"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Result types: the application declares, once, the Go type the values of
// a key space hold (RegisterResultType). The JSON Schema of that type is
// stored in the database, so that the operator tools of other processes
// (the sentinel command, the console) refuse an operator's value that the
// application's callers could not use, before it is stored. Independently
// of any declaration, a value an operator stored is replayed strictly (see
// replayOr): never as a silent zero value.

// ErrResultType reports a value that does not fit a result type: an
// operator's value refused because it does not match the type declared
// for its key (RegisterResultType; nothing was written), or, on replay, a
// value an operator stored that does not decode into the caller's type
// (the error also matches ErrResult). The error is a *ResultTypeError.
var ErrResultType = errors.New("sentinel: value does not match the result type")

// ResultTypeError describes a value that does not fit a result type. It
// matches ErrResultType.
type ResultTypeError struct {
	Namespace string
	Key       string
	Type      string // the Go type, as reflect prints it ("main.Receipt")
	Prefix    string // the key space the type was declared for; empty when it is the caller's type on replay
	// Path is the JSON path of the first error: "$" for the value itself,
	// "$.charge_id" for a member, "$.items[2].sku" deeper down. A member
	// that is missing or not allowed is named in the path.
	Path   string
	Reason string // what is wrong there
}

func (e *ResultTypeError) Error() string {
	declared := ""
	if e.Prefix != "" {
		declared = fmt.Sprintf(" (declared for the keys starting with %q)", e.Prefix)
	}
	return fmt.Sprintf("sentinel: the value for %q/%q does not match the result type %s%s: at %s: %s",
		e.Namespace, e.Key, e.Type, declared, e.Path, e.Reason)
}

// Unwrap returns ErrResultType.
func (e *ResultTypeError) Unwrap() error { return ErrResultType }

// ResultType is the declared result type of the keys of a namespace that
// start with Prefix (see RegisterResultType).
type ResultType struct {
	Namespace    string
	Prefix       string
	Name         string          // the Go type, as reflect prints it ("main.Receipt")
	Schema       json.RawMessage // its JSON Schema (draft 2020-12), reflected from the type
	RegisteredBy string          // the Owner of the client that declared it
	RegisteredAt time.Time       // database clock
}

// httpKeyPrefix starts the keys of package idempotency (its KeyPrefix),
// whose values are HTTP responses that package checks itself: no result
// type may cover them.
const httpKeyPrefix = "idempotency:"

// RegisterResultType declares that the keys of the client's namespace (or
// the one given by WithNamespace) that start with prefix hold values of
// type T, encoded with the default JSON codec: the type Once's fn returns
// and callers decode into. Call it at start-up, for example after Migrate,
// once per key space:
//
//	sentinel.RegisterResultType[Receipt](ctx, client, "charge-")
//
// It reflects T's JSON Schema (draft 2020-12) from its encoding/json form
// (json tags; a field without omitempty or omitzero is required; a struct
// allows no other members; a type with its own MarshalJSON or
// UnmarshalJSON allows any value; the jsonschema struct tags of
// github.com/invopop/jsonschema refine it, for example
// `jsonschema:"nullable"` on a pointer field that may be null) and stores
// it in the database, replacing an earlier declaration of the same prefix.
// From then on an operator's value for such a key (ForceComplete,
// SetResult, `sentinel force-complete` and `set-result`, the console) is
// checked against it before anything is written: a value with an unknown
// member, a missing required member or a member of the wrong type is
// refused with a *ResultTypeError (ErrResultType) naming the JSON path of
// the first error. The operator tools show the expected shape. When
// several prefixes match a key, the longest wins.
//
// Declaring is optional: without a declaration an operator's value is
// still replayed strictly (see Once), but only the caller learns that it
// does not fit. It costs Once nothing: the check happens on the operator's
// write, never on the caller's path.
//
// prefix must be a non-empty key prefix; keys of package idempotency
// ("idempotency:...") hold HTTP responses checked by that package, and a
// prefix covering them is refused (ErrInvalid). A type the reflection
// cannot describe (a channel, a function) is refused too.
// A nil ctx is refused (ErrInvalid).
func RegisterResultType[T any](ctx context.Context, c *Client, prefix string, opts ...Option) error {
	if err := checkCtx("RegisterResultType", ctx); err != nil {
		return err
	}
	if c == nil {
		return invalid("client", "must not be nil")
	}
	if err := c.checkOpen(); err != nil {
		return err
	}
	ns, err := c.namespaceOption(opts, "RegisterResultType")
	if err != nil {
		return err
	}
	if prefix == "" {
		return invalid("prefix", "must not be empty: declare the type of a key space, such as \"charge-\"")
	}
	if err := checkName("prefix", prefix, MaxKeyLen); err != nil {
		return err
	}
	if strings.HasPrefix(httpKeyPrefix, prefix) || strings.HasPrefix(prefix, httpKeyPrefix) {
		return invalid("prefix", "%q covers the keys of the idempotency middleware (%q...), which hold HTTP responses that package checks itself", prefix, httpKeyPrefix)
	}
	t := reflect.TypeFor[T]()
	schema, err := reflectSchema(t)
	if err != nil {
		return invalid("type", "%s: %v", t, err)
	}
	if _, err := compileSchema(schema); err != nil {
		return invalid("type", "%s: its reflected JSON Schema does not compile: %v", t, err)
	}
	_, err = c.pool.Exec(ctx, c.rt.register, ns, prefix, t.String(), string(schema), c.cfg.Owner)
	if err != nil {
		return c.wrapErr(fmt.Sprintf("register the result type of %q/%q...", ns, prefix), err)
	}
	return nil
}

// ResultType returns the result type declared for key (the declaration
// with the longest prefix of key; see RegisterResultType), or an error
// matching ErrNotFound when none is. Options: WithNamespace.
// A nil ctx is refused (ErrInvalid).
func (c *Client) ResultType(ctx context.Context, key string, opts ...Option) (*ResultType, error) {
	if err := checkCtx("Client.ResultType", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolve(key, opts, onlyTakes("ResultType", 0))
	if err != nil {
		return nil, err
	}
	return c.resultType(ctx, o.namespace, key)
}

func (c *Client) resultType(ctx context.Context, ns, key string) (*ResultType, error) {
	rt := ResultType{Namespace: ns}
	var schema string
	err := c.pool.QueryRow(ctx, c.rt.lookup, ns, key).Scan(&rt.Prefix, &rt.Name, &schema, &rt.RegisteredBy, &rt.RegisteredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sentinel: no result type declared for %q/%q: %w", ns, key, ErrNotFound)
	}
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read the result type of %q/%q", ns, key), err)
	}
	rt.Schema = json.RawMessage(schema)
	return &rt, nil
}

// Check reports whether value (JSON) is a value of the type for key: nil,
// or a *ResultTypeError naming the JSON path of the first error.
func (t *ResultType) Check(key string, value []byte) error {
	sch, err := compileSchema(t.Schema)
	if err != nil {
		return fmt.Errorf("sentinel: the declared result type %s of %q/%q... cannot be used: %w", t.Name, t.Namespace, t.Prefix, err)
	}
	path, reason, ok := validate(sch, value)
	if ok {
		return nil
	}
	return &ResultTypeError{Namespace: t.Namespace, Key: key, Type: t.Name, Prefix: t.Prefix, Path: path, Reason: reason}
}

// namespaceOption reads the only option an operation takes, WithNamespace.
func (c *Client) namespaceOption(opts []Option, what string) (string, error) {
	o := callOptions{namespace: c.cfg.Namespace}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.ttlSet || o.hardSet || o.wait || o.force || o.codec != nil || o.metadata != nil || o.token != 0 || o.allNamespaces ||
		o.rerunSet || o.limitSet || o.labelSet || o.afterSet {
		return "", invalid("option", "only WithNamespace applies to %s", what)
	}
	return o.namespace, checkNamespace(o.namespace)
}

// resultTypeSQL holds the statements of result types, for the client's
// schema.
type resultTypeSQL struct{ register, lookup string }

func newResultTypeSQL(schema string) *resultTypeSQL {
	r := strings.NewReplacer("{{schema}}", schema)
	return &resultTypeSQL{register: r.Replace(sqlRegisterResultType), lookup: r.Replace(sqlLookupResultType)}
}

// sqlRegisterResultType declares (or re-declares) a key space's type; an
// identical declaration writes nothing, so every start-up may repeat it.
// $1 namespace, $2 prefix, $3 type name, $4 schema, $5 owner.
const sqlRegisterResultType = `
INSERT INTO {{schema}}.result_types AS t (namespace, prefix, type_name, schema, registered_by, registered_at)
VALUES ($1, $2, $3, $4::json, $5, pg_catalog.now())
ON CONFLICT (namespace, prefix) DO UPDATE SET
    type_name = EXCLUDED.type_name, schema = EXCLUDED.schema,
    registered_by = EXCLUDED.registered_by, registered_at = EXCLUDED.registered_at
WHERE t.type_name IS DISTINCT FROM EXCLUDED.type_name OR t.schema::text IS DISTINCT FROM EXCLUDED.schema::text`

// sqlLookupResultType finds the declaration with the longest prefix of
// key $2 in namespace $1.
const sqlLookupResultType = `
SELECT t.prefix, t.type_name, t.schema::text, t.registered_by, t.registered_at
FROM {{schema}}.result_types t
WHERE t.namespace = $1 AND pg_catalog.starts_with($2, t.prefix)
ORDER BY pg_catalog.length(t.prefix) DESC
LIMIT 1`

// checkOperatorValue checks an operator's JSON value for key against the
// declared type of its key space, if any: one statement, on the
// operator's path only.
func (c *Client) checkOperatorValue(ctx context.Context, ns, key string, data []byte) error {
	rt, err := c.resultType(ctx, ns, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return rt.Check(key, data)
}

// strictDecode decodes a value an operator stored into v (a pointer to the
// caller's type), refusing what does not fit the type: a member the type
// does not have, a required member missing, a member of the wrong type, a
// null where the type has no null. The check costs no statement: the
// type's schema is reflected once per type and kept.
func strictDecode(ns, key string, data []byte, v any) error {
	t := reflect.TypeOf(v).Elem()
	if sch := replaySchema(t); sch != nil {
		if path, reason, ok := validate(sch, data); !ok {
			return &ResultTypeError{Namespace: ns, Key: key, Type: t.String(), Path: path, Reason: reason}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &ResultTypeError{Namespace: ns, Key: key, Type: t.String(), Path: "$", Reason: err.Error()}
	}
	return nil
}

// replaySchemas caches the compiled schema of each caller type, for
// strictDecode: nil for a type the reflection cannot describe (its value
// is then decoded with unknown members refused, and nothing more).
var replaySchemas sync.Map // reflect.Type -> *validator.Schema

func replaySchema(t reflect.Type) *validator.Schema {
	if s, ok := replaySchemas.Load(t); ok {
		return s.(*validator.Schema)
	}
	var sch *validator.Schema
	if b, err := reflectSchema(t); err == nil {
		if b, err = nilsAsNull(b); err == nil {
			sch, _ = compileSchema(b)
		}
	}
	replaySchemas.Store(t, sch)
	return sch
}

// nilsAsNull lets a replay's schema (replaySchema) take null where
// encoding/json writes it for a zero value of T: a nil slice, []byte or
// map. An operator's value built in Go from the callers' own type
// (ForceComplete(ctx, key, receipt)) holds such nulls, and encoding/json
// decodes them back to nil: the replay refused it as not fitting the
// type. Pointers are left as declared (a pointer member that may be null
// says so with `jsonschema:"nullable"`, see RegisterResultType), and so is
// the schema RegisterResultType stores for the operator tools. A oneOf
// with a null alternative (a nullable member) becomes an anyOf, which a
// null now matching both alternatives still satisfies.
func nilsAsNull(schema []byte) ([]byte, error) {
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, err
	}
	var walk func(v any)
	walk = func(v any) {
		switch n := v.(type) {
		case []any:
			for _, e := range n {
				walk(e)
			}
		case map[string]any:
			for _, e := range n {
				walk(e)
			}
			if alts, ok := n["oneOf"].([]any); ok && slices.ContainsFunc(alts, isNullSchema) {
				n["anyOf"] = alts
				delete(n, "oneOf")
			}
			typ, _ := n["type"].(string)
			_, fixedLen := n["maxItems"] // a Go array, never null
			_, intKeys := n["patternProperties"]
			switch {
			case typ == "array" && !fixedLen,
				typ == "string" && n["contentEncoding"] == "base64",                // []byte
				typ == "object" && (n["additionalProperties"] != false || intKeys): // a map, not a struct
				n["type"] = []any{typ, "null"}
			}
		}
	}
	walk(root)
	return json.Marshal(root)
}

func isNullSchema(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 1 && m["type"] == "null"
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshaler     = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler   = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler     = reflect.TypeFor[encoding.TextMarshaler]()
	schemaDescription = reflect.TypeFor[interface{ JSONSchema() *jsonschema.Schema }]()
)

// reflectSchema is the JSON Schema of t's encoding/json form, as JSON. A
// pointer type also accepts null.
func reflectSchema(t reflect.Type) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil { // the reflector panics on types JSON cannot hold
			b, err = nil, fmt.Errorf("no JSON Schema: %v", p)
		}
	}()
	r := &jsonschema.Reflector{Anonymous: true, ExpandedStruct: true, Mapper: mapType}
	b, err = json.Marshal(r.ReflectFromType(t))
	if err != nil || t.Kind() != reflect.Pointer {
		return b, err
	}
	// The root of a pointer type may be null; its definitions stay at
	// the root, where references find them.
	var root map[string]json.RawMessage
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, k := range []string{"$schema", "$defs"} {
		if v, ok := root[k]; ok {
			out[k] = v
			delete(root, k)
		}
	}
	out["anyOf"] = []any{map[string]string{"type": "null"}, root}
	return json.Marshal(out)
}

// mapType gives the schema of the types that encode themselves: any value
// for a json.Marshaler or json.Unmarshaler (the reflection cannot know its
// form), a string for an encoding.TextMarshaler. A type describing its own
// schema (a JSONSchema method), and time.Time, are left to the reflector.
func mapType(t reflect.Type) *jsonschema.Schema {
	pt := reflect.PointerTo(t)
	has := func(i reflect.Type) bool { return t.Implements(i) || pt.Implements(i) }
	switch {
	case t == timeType || has(schemaDescription):
		return nil
	case has(jsonMarshaler) || has(jsonUnmarshaler):
		return &jsonschema.Schema{}
	case has(textMarshaler):
		return &jsonschema.Schema{Type: "string"}
	}
	return numberBounds(t)
}

// numberBounds gives a Go number type the range encoding/json decodes
// into it: a uint8 field refuses 256 and -1, a float32 field 1e39. JSON
// Schema's "integer" and "number" know no width, and an operator's value
// beyond it would be stored while every caller got ErrResult for it.
func numberBounds(t reflect.Type) *jsonschema.Schema {
	var lo, hi string
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		shift := 64 - t.Bits()
		lo = strconv.FormatInt(math.MinInt64>>shift, 10)
		hi = strconv.FormatInt(math.MaxInt64>>shift, 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		lo, hi = "0", strconv.FormatUint(uint64(math.MaxUint64)>>(64-t.Bits()), 10)
	case reflect.Float32:
		return &jsonschema.Schema{Type: "number",
			Minimum: json.Number(strconv.FormatFloat(-math.MaxFloat32, 'g', -1, 32)),
			Maximum: json.Number(strconv.FormatFloat(math.MaxFloat32, 'g', -1, 32))}
	default:
		return nil
	}
	return &jsonschema.Schema{Type: "integer", Minimum: json.Number(lo), Maximum: json.Number(hi)}
}

// compiled caches compiled schemas by their text.
var compiled sync.Map // string -> *validator.Schema

// compileSchema compiles a JSON Schema held as JSON. It loads nothing from
// outside: every reference must be to the document itself.
func compileSchema(schema []byte) (*validator.Schema, error) {
	if s, ok := compiled.Load(string(schema)); ok {
		return s.(*validator.Schema), nil
	}
	doc, err := validator.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	const url = "urn:sentinel:result-type"
	c := validator.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	compiled.Store(string(schema), sch)
	return sch, nil
}

// noLoader refuses to load any schema from outside.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a result type's schema refers to %s; only references within the schema are followed", url)
}

var english = message.NewPrinter(language.English)

// validate checks the JSON value data against sch. When it does not match,
// it returns the JSON path of the first error and what is wrong there.
func validate(sch *validator.Schema, data []byte) (path, reason string, ok bool) {
	inst, err := validator.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return "$", "not a JSON value: " + err.Error(), false
	}
	err = sch.Validate(inst)
	if err == nil {
		if loc, reason, ok := goIntegers(sch, inst, nil, 0); !ok {
			return jsonPath(inst, loc), reason, false
		}
		return "", "", true
	}
	var ve *validator.ValidationError
	if !errors.As(err, &ve) {
		return "$", err.Error(), false
	}
	// The first error, except that an unknown member comes before a
	// missing one: a misspelt member is both, and its spelling is what
	// the operator must fix.
	var leaves []*validator.ValidationError
	var walk func(*validator.ValidationError)
	walk = func(e *validator.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	first := leaves[0]
	for _, l := range leaves {
		if _, ok := l.ErrorKind.(*kind.AdditionalProperties); ok {
			first = l
			break
		}
	}
	loc := first.InstanceLocation
	switch k := first.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		if len(k.Properties) > 0 {
			reason = "unknown member: the type has no such field"
			for _, l := range leaves {
				if r, ok := l.ErrorKind.(*kind.Required); ok && slices.Equal(l.InstanceLocation, loc) {
					reason += " (it requires " + strings.Join(r.Missing, ", ") + ")"
				}
			}
			return jsonPath(inst, append(slices.Clone(loc), k.Properties[0])), reason, false
		}
	case *kind.Required:
		if len(k.Missing) > 0 {
			return jsonPath(inst, append(slices.Clone(loc), k.Missing[0])), "missing: the type requires this member", false
		}
	}
	return jsonPath(inst, loc), first.ErrorKind.LocalizedString(english), false
}

// jsonPath writes an instance location as a JSON path ("$.a[2].b"),
// reading inst to tell array indexes from member names.
func jsonPath(inst any, loc []string) string {
	var b strings.Builder
	b.WriteString("$")
	cur := inst
	for _, tok := range loc {
		if arr, ok := cur.([]any); ok {
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 {
				fmt.Fprintf(&b, "[%d]", i)
				cur = nil
				if i < len(arr) {
					cur = arr[i]
				}
				continue
			}
		}
		if isIdent(tok) {
			b.WriteString("." + tok)
		} else {
			b.WriteString("[" + strconv.Quote(tok) + "]")
		}
		obj, _ := cur.(map[string]any)
		cur = obj[tok]
	}
	return b.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// Shape is the type's JSON form in brief, for a person typing a value: its
// members in the type's order, each with its JSON type, "?" after a member
// a value may leave out, for example
//
//	{"charge_id": string, "amount": integer, "note"?: string}
//
// Schema is the exact reference.
func (t *ResultType) Shape() string {
	dec := json.NewDecoder(bytes.NewReader(t.Schema))
	dec.UseNumber()
	root, err := decodeOrdered(dec)
	if err != nil {
		return "(see the schema)"
	}
	defs, _ := member(root, "$defs").(*ordered)
	return shapeOf(root, defs, 0)
}

// ordered is a JSON object with its members in document order.
type ordered struct {
	keys []string
	vals map[string]any
}

func member(v any, k string) any {
	if o, ok := v.(*ordered); ok {
		return o.vals[k]
	}
	return nil
}

// decodeOrdered decodes one JSON value, objects as *ordered.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &ordered{vals: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			o.keys, o.vals[key] = append(o.keys, key), v
		}
		_, err = dec.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err = dec.Token()
		return a, err
	}
	return tok, nil
}

// shapeOf renders the schema s in brief (see ResultType.Shape).
func shapeOf(s any, defs *ordered, depth int) string {
	if depth > 8 {
		return "…"
	}
	o, ok := s.(*ordered)
	if !ok || len(o.keys) == 0 {
		return "any"
	}
	if ref, ok := o.vals["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/$defs/")
		if d, ok := member(defs, name).(*ordered); ok && depth < 4 {
			return shapeOf(d, defs, depth+1)
		}
		return name
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := o.vals[k].([]any); ok {
			parts := make([]string, len(alts))
			for i, a := range alts {
				parts[i] = shapeOf(a, defs, depth+1)
			}
			return strings.Join(parts, " | ")
		}
	}
	switch typ := o.vals["type"].(type) {
	case []any:
		parts := make([]string, 0, len(typ))
		for _, t := range typ {
			parts = append(parts, fmt.Sprint(t))
		}
		return strings.Join(parts, " | ")
	case string:
		switch typ {
		case "object":
			return objectShape(o, defs, depth)
		case "array":
			return "[" + shapeOf(o.vals["items"], defs, depth+1) + ", ...]"
		case "string":
			if f, ok := o.vals["format"].(string); ok {
				return "string (" + f + ")"
			}
			if e, ok := o.vals["contentEncoding"].(string); ok {
				return "string (" + e + ")"
			}
		}
		return typ
	}
	return "any"
}

func objectShape(o *ordered, defs *ordered, depth int) string {
	props, _ := o.vals["properties"].(*ordered)
	if props == nil || len(props.keys) == 0 {
		if ap, ok := o.vals["additionalProperties"].(*ordered); ok {
			return "{string: " + shapeOf(ap, defs, depth+1) + "}"
		}
		return "{...}"
	}
	required := map[string]bool{}
	if req, ok := o.vals["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				required[s] = true
			}
		}
	}
	parts := make([]string, 0, len(props.keys))
	for _, k := range props.keys {
		opt := "?"
		if required[k] {
			opt = ""
		}
		parts = append(parts, strconv.Quote(k)+opt+": "+shapeOf(props.vals[k], defs, depth+1))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
