// Package wiretest holds what the tests of the wire packages (providers/openai,
// providers/anthropic) share to keep their hand-written JSON decoders and encoders complete:
// the fields of a wire type found by reflection, which of them decoded values set, and a
// value with every field set. A field added to a wire struct is thus one these tests list
// and fill, and a fast path that is not taught it fails them; nothing names fields by hand.
// It is imported by tests only.
package wiretest

import (
	"encoding/json"
	"reflect"
)

// Naming says how a Coverage names a field.
type Naming int

const (
	// ByPath names a field by its path from the root type,
	// "ChatResponse.Choices.Message.Content": a struct type held in two places has its
	// fields listed, and must be set, in both.
	ByPath Naming = iota
	// ByType names a field by the struct type that declares it, "ContentBlock.Text": each
	// struct type's fields are listed once, and one value that sets a field anywhere covers
	// it. This fits decoders written one per type, where a type decodes alike wherever it
	// is held. A field of an anonymous struct is named by its path.
	ByType
)

// prefix is what the fields of the struct type t, reached at path, are named after.
func (n Naming) prefix(t reflect.Type, path string) string {
	if n == ByType && t.Name() != "" {
		return t.Name()
	}
	return path
}

// Coverage records which fields of some wire types the values it is shown set.
type Coverage struct {
	naming Naming
	fields []string
	set    map[string]bool
}

// NewCoverage returns a Coverage of the exported fields of the given types (structs, or
// pointers or slices of them) and of the structs they hold, except those that decode
// themselves (UnmarshalJSON) and what they hold. Unexported fields are left out:
// encoding/json never decodes them.
func NewCoverage(n Naming, types ...reflect.Type) *Coverage {
	c := &Coverage{naming: n, set: map[string]bool{}}
	listed := map[string]bool{}
	for _, t := range types {
		st := structUnder(t)
		if st == nil {
			panic("wiretest: no struct type to cover in " + t.String())
		}
		seen := map[reflect.Type]bool{}
		c.list(st, n.prefix(st, st.Name()), seen, func(name string) {
			if !listed[name] {
				listed[name] = true
				c.fields = append(c.fields, name)
			}
		})
	}
	return c
}

// list calls add with the name of every field of the struct type t and of the structs it
// holds. seen stops a type from being walked twice (ByType) or within itself (ByPath).
func (c *Coverage) list(t reflect.Type, prefix string, seen map[reflect.Type]bool, add func(string)) {
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // never decoded (what an encoder is asked to add)
		}
		path := prefix + "." + f.Name
		add(path)
		if st := structUnder(f.Type); st != nil && !seen[st] {
			c.list(st, c.naming.prefix(st, path), seen, add)
		}
	}
	if c.naming == ByPath {
		delete(seen, t) // only recursion is cut: the same type elsewhere is listed again
	}
}

// Mark records the fields that v, a struct or a pointer or slice of them (as json.Unmarshal
// decodes it), sets: those that are not zero, and theirs.
func (c *Coverage) Mark(v any) {
	rv := reflect.ValueOf(v)
	st := structUnder(rv.Type())
	if st == nil {
		panic("wiretest: no struct type to mark in " + rv.Type().String())
	}
	c.mark(rv, c.naming.prefix(st, st.Name()))
}

func (c *Coverage) mark(v reflect.Value, prefix string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			c.mark(v.Elem(), prefix)
		}
	case reflect.Slice:
		for i := range v.Len() {
			c.mark(v.Index(i), prefix)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f, path := v.Field(i), prefix+"."+v.Type().Field(i).Name
			if !f.IsZero() {
				c.set[path] = true
			}
			if st := structUnder(f.Type()); st != nil {
				c.mark(f, c.naming.prefix(st, path))
			}
		}
	}
}

// Unset returns the fields that no value Mark was shown sets, in the order of the types
// and of their declarations.
func (c *Coverage) Unset() []string {
	var out []string
	for _, name := range c.fields {
		if !c.set[name] {
			out = append(out, name)
		}
	}
	return out
}

// structUnder returns the struct type that t is, points to or holds as elements; nil for
// other types and for those that decode themselves (UnmarshalJSON).
func structUnder(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	return t
}

// Fill sets every exported field of v, recursively, to a value that json.Marshal writes: s
// for strings, raw() (or a valid value with spaces, escapes and U+2028 when raw is nil) for
// json.RawMessage, true, a large negative integer, a float in exponent notation, two
// elements per slice, pointers to such values. A field added to a wire type is thus set
// here, json.Marshal writes it, and a fast encoder must write it too, a fast decoder read
// it. Fill panics on a kind it has no value for: teach it one.
func Fill(v reflect.Value, s string, raw func() []byte) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(-9007199254740993)
	case reflect.Float64:
		v.SetFloat(1.5e-7)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		Fill(v.Elem(), s, raw)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			if raw == nil {
				v.SetBytes([]byte(" [ \"<\u2028>\" , {\"a\" : null} ] "))
			} else {
				v.SetBytes(raw())
			}
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			Fill(v.Index(i), s, raw)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			// json.Marshal skips unexported fields (what an encoder is asked to add).
			if v.Type().Field(i).IsExported() {
				Fill(v.Field(i), s, raw)
			}
		}
	default:
		panic("wiretest: Fill has no value for " + v.Type().String())
	}
}
