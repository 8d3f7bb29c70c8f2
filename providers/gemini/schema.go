package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Gemini's `parameters` and `responseSchema` are its OpenAPI-3.0-subset Schema message, and
// any key outside it is a hard 400 ("Unknown name ... Cannot find field"), so JSON Schemas
// from clients (MCP servers, Zod, OpenAI strict mode) are rewritten into that subset
// (translation map §3.4, bug 11):
//
//   - $ref to #/$defs/..., #/definitions/... or # is inlined; a recursive reference
//     becomes a bare OBJECT;
//   - allOf members are merged into their parent; oneOf becomes anyOf; a null member of
//     anyOf becomes nullable;
//   - type arrays become one type (["string","null"] is STRING + nullable; of several
//     non-null types the first is kept); type names are upper-cased;
//   - const becomes a one-value enum; enums that are not all strings, and formats Gemini
//     rejects, are moved into the description;
//   - examples becomes example; numeric exclusiveMinimum/Maximum become minimum/maximum;
//   - required keeps only the properties that exist;
//   - every other keyword ($schema, $id, additionalProperties, patternProperties,
//     propertyNames, uniqueItems, multipleOf, not, if/then/else, strict...) is dropped.
//
// Key order is kept, so that the model sees the properties in the order the client wrote
// them; response schemas also get propertyOrdering, which makes Gemini emit the keys in
// that order.

// maxSchemaDepth bounds the nesting of a schema after $ref inlining. Gemini's own limit is
// lower; this one only keeps hostile input from exhausting the stack.
const maxSchemaDepth = 64

// errSchemaTooDeep is the error of a schema nested beyond maxSchemaDepth.
var errSchemaTooDeep = errors.New("schema nests too deep")

// member is one key of an object, in document order.
type member struct {
	key string
	val any
}

// object is a JSON object that keeps its key order. Other values decode as json.Number,
// string, bool, nil and []any.
type object []member

func (o object) get(key string) (any, bool) {
	for _, m := range o {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

func (o object) has(key string) bool {
	_, ok := o.get(key)
	return ok
}

// set replaces key or appends it.
func (o *object) set(key string, val any) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].val = val
			return
		}
	}
	*o = append(*o, member{key, val})
}

func (o *object) del(key string) {
	for i := range *o {
		if (*o)[i].key == key {
			*o = append((*o)[:i], (*o)[i+1:]...)
			return
		}
	}
}

// MarshalJSON writes the object with its keys in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(m.val)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// parseOrdered decodes one JSON value keeping object key order.
func parseOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

// maxParseDepth bounds the nesting parseValue accepts; schemas deeper than maxSchemaDepth
// fail later anyway, but default and example values may nest a little more.
const maxParseDepth = 256

func parseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxParseDepth {
		return nil, errSchemaTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch d {
	case '{':
		var o object
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, ok := kt.(string)
			if !ok {
				return nil, errors.New("object key is not a string")
			}
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			o.set(key, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		if o == nil {
			o = object{}
		}
		return o, nil
	case '[':
		a := []any{}
		for dec.More() {
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		return a, nil
	}
	return nil, fmt.Errorf("unexpected delimiter %v", d)
}

// sanitizer rewrites one JSON Schema document.
type sanitizer struct {
	root     any
	defs     object
	defsOld  object
	stack    []string
	ordering bool // add propertyOrdering (response schemas)
	nodes    int
}

// maxSchemaNodes bounds the schemas visited, which $ref inlining could otherwise blow up
// exponentially.
const maxSchemaNodes = 20000

// sanitizeSchema rewrites a JSON Schema into Gemini's Schema subset. ordering adds
// propertyOrdering to every object with properties. It returns nil for a schema that says
// nothing (null, true, {}).
func sanitizeSchema(raw json.RawMessage, ordering bool) (object, error) {
	v, err := parseOrdered(raw)
	if err != nil {
		return nil, err
	}
	switch t := v.(type) {
	case nil, bool:
		return nil, nil
	case object:
		s := &sanitizer{root: t, ordering: ordering}
		if d, ok := t.get("$defs"); ok {
			s.defs, _ = d.(object)
		}
		if d, ok := t.get("definitions"); ok {
			s.defsOld, _ = d.(object)
		}
		out, err := s.schema(t, 0)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			return nil, nil
		}
		return out, nil
	}
	return nil, errors.New("a schema must be a JSON object")
}

// geminiTypes maps JSON Schema type names to Gemini's Type enum.
var geminiTypes = map[string]string{
	"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
	"array": "ARRAY", "object": "OBJECT", "null": "NULL",
}

// allowedFormats are the formats Gemini's Schema accepts; others are rejected with a 400 on
// some models, so they move into the description.
var allowedFormats = map[string]bool{
	"date-time": true, "enum": true, "float": true, "double": true, "int32": true, "int64": true,
}

func (s *sanitizer) schema(v any, depth int) (object, error) {
	if depth > maxSchemaDepth {
		return nil, errSchemaTooDeep
	}
	if s.nodes++; s.nodes > maxSchemaNodes {
		return nil, errors.New("schema too large once its references are inlined")
	}
	in, ok := v.(object)
	if !ok {
		// true, false or garbage: a schema that constrains nothing.
		return object{}, nil
	}
	if ref, ok := in.get("$ref"); ok {
		if r, ok := ref.(string); ok {
			return s.ref(r, in, depth)
		}
	}
	out := object{}
	var notes []string
	var typeName string
	nullable := false
	for _, m := range in {
		switch m.key {
		case "type":
			switch t := m.val.(type) {
			case string:
				typeName = strings.ToLower(t)
			case []any:
				for _, e := range t {
					name, _ := e.(string)
					name = strings.ToLower(name)
					if name == "null" {
						nullable = true
					} else if typeName == "" && geminiTypes[name] != "" {
						typeName = name
					}
				}
				if typeName == "" && nullable {
					typeName, nullable = "null", false
				}
			}
		case "nullable":
			if b, ok := m.val.(bool); ok && b {
				nullable = true
			}
		case "title", "description", "pattern":
			if str, ok := m.val.(string); ok {
				out.set(m.key, str)
			}
		case "format":
			if str, ok := m.val.(string); ok {
				if allowedFormats[str] {
					out.set("format", str)
				} else {
					notes = append(notes, "Format: "+str+".")
				}
			}
		case "enum":
			if a, ok := m.val.([]any); ok && len(a) > 0 {
				if strs, ok := allStrings(a); ok {
					out.set("enum", strs)
				} else {
					notes = append(notes, "Allowed values: "+jsonList(a)+".")
				}
			}
		case "const":
			if str, ok := m.val.(string); ok {
				out.set("enum", []any{str})
			} else {
				notes = append(notes, "Value must be "+jsonList([]any{m.val})+".")
			}
		case "default", "example":
			out.set(m.key, m.val)
		case "examples":
			if a, ok := m.val.([]any); ok && len(a) > 0 && !in.has("example") {
				out.set("example", a[0])
			}
		case "minimum", "maximum":
			if n, ok := m.val.(json.Number); ok {
				out.set(m.key, n)
			}
		case "exclusiveMinimum", "exclusiveMaximum":
			// Draft 6+ gives a number (draft 4 a boolean, which says nothing alone).
			if n, ok := m.val.(json.Number); ok {
				key := "minimum"
				if m.key == "exclusiveMaximum" {
					key = "maximum"
				}
				if !in.has(key) {
					out.set(key, n)
				}
			}
		case "minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties":
			if n, ok := m.val.(json.Number); ok {
				if _, err := n.Int64(); err == nil {
					out.set(m.key, n)
				}
			}
		case "items", "prefixItems":
			if m.key == "prefixItems" && out.has("items") {
				continue
			}
			item := m.val
			if a, ok := item.([]any); ok {
				// A tuple: Gemini has no tuples, the first item type stands for all.
				if len(a) == 0 {
					continue
				}
				item = a[0]
			}
			if _, ok := item.(object); !ok {
				continue
			}
			sub, err := s.schema(item, depth+1)
			if err != nil {
				return nil, err
			}
			out.set("items", sub)
		case "properties":
			props, ok := m.val.(object)
			if !ok {
				continue
			}
			outProps := object{}
			for _, p := range props {
				sub, err := s.schema(p.val, depth+1)
				if err != nil {
					return nil, err
				}
				outProps.set(p.key, sub)
			}
			out.set("properties", outProps)
		case "anyOf", "oneOf":
			a, ok := m.val.([]any)
			if !ok {
				continue
			}
			var alts []any
			for _, e := range a {
				sub, err := s.schema(e, depth+1)
				if err != nil {
					return nil, err
				}
				if t, _ := sub.get("type"); t == "NULL" && len(sub) == 1 {
					nullable = true
					continue
				}
				alts = append(alts, sub)
			}
			if prev, ok := out.get("anyOf"); ok {
				alts = append(prev.([]any), alts...)
			}
			if len(alts) > 0 {
				out.set("anyOf", alts)
			}
		case "allOf":
			a, ok := m.val.([]any)
			if !ok {
				continue
			}
			for _, e := range a {
				sub, err := s.schema(e, depth+1)
				if err != nil {
					return nil, err
				}
				merge(&out, sub)
			}
		}
	}
	if props, ok := out.get("properties"); ok && len(props.(object)) == 0 {
		// Gemini rejects an empty properties map.
		out.del("properties")
	}
	if typeName != "" {
		if t := geminiTypes[typeName]; t != "" {
			out.set("type", t)
		}
	}
	// A single alternative is no alternative: fold it into the schema.
	if alts, ok := out.get("anyOf"); ok {
		if a := alts.([]any); len(a) == 1 {
			out.del("anyOf")
			merge(&out, a[0].(object))
		}
	}
	if !out.has("type") && !out.has("anyOf") {
		switch {
		case out.has("properties"):
			out.set("type", "OBJECT")
		case out.has("items"):
			out.set("type", "ARRAY")
		case out.has("enum"):
			out.set("type", "STRING")
		}
	}
	if nullable {
		out.set("nullable", true)
	}
	if req, ok := in.get("required"); ok {
		if a, ok := req.([]any); ok {
			props, _ := out.get("properties")
			po, _ := props.(object)
			var names []any
			for _, e := range a {
				if name, ok := e.(string); ok && po.has(name) && !containsString(names, name) {
					names = append(names, name)
				}
			}
			if len(names) > 0 {
				out.set("required", names)
			}
		}
	}
	if s.ordering {
		if props, ok := out.get("properties"); ok {
			if po := props.(object); len(po) > 1 {
				order := make([]any, 0, len(po))
				for _, p := range po {
					order = append(order, p.key)
				}
				out.set("propertyOrdering", order)
			}
		}
	}
	if len(notes) > 0 {
		desc, _ := out.get("description")
		d, _ := desc.(string)
		if d != "" {
			d += " "
		}
		out.set("description", d+strings.Join(notes, " "))
	}
	return out, nil
}

// ref inlines a $ref. Sibling keywords of the reference (description, default...) are
// kept over those of the target.
func (s *sanitizer) ref(ref string, in object, depth int) (object, error) {
	var target any
	switch {
	case ref == "#":
		target = s.root
	case strings.HasPrefix(ref, "#/$defs/"):
		target, _ = s.defs.get(unescapePointer(ref[len("#/$defs/"):]))
	case strings.HasPrefix(ref, "#/definitions/"):
		target, _ = s.defsOld.get(unescapePointer(ref[len("#/definitions/"):]))
	}
	cyclic := false
	for _, r := range s.stack {
		if r == ref {
			cyclic = true
		}
	}
	siblings := make(object, 0, len(in))
	for _, m := range in {
		if m.key != "$ref" {
			siblings = append(siblings, m)
		}
	}
	var out object
	if target == nil || cyclic {
		// Unresolvable or recursive: Gemini's Schema cannot say more than "an object".
		out = object{{"type", "OBJECT"}}
	} else {
		s.stack = append(s.stack, ref)
		resolved, err := s.schema(target, depth+1)
		s.stack = s.stack[:len(s.stack)-1]
		if err != nil {
			return nil, err
		}
		out = resolved
	}
	if len(siblings) > 0 {
		sib, err := s.schema(siblings, depth+1)
		if err != nil {
			return nil, err
		}
		for _, m := range sib {
			if m.key == "type" && out.has("type") {
				continue
			}
			out.set(m.key, m.val)
		}
	}
	return out, nil
}

// merge folds src into dst: properties and required are united, other keys are taken
// when dst lacks them.
func merge(dst *object, src object) {
	for _, m := range src {
		switch m.key {
		case "properties":
			cur, ok := dst.get("properties")
			if !ok {
				dst.set("properties", m.val)
				continue
			}
			props := cur.(object)
			for _, p := range m.val.(object) {
				if !props.has(p.key) {
					props = append(props, p)
				}
			}
			dst.set("properties", props)
		case "required":
			cur, _ := dst.get("required")
			names, _ := cur.([]any)
			for _, n := range m.val.([]any) {
				if !containsString(names, n.(string)) {
					names = append(names, n)
				}
			}
			dst.set("required", names)
		default:
			if !dst.has(m.key) {
				dst.set(m.key, m.val)
			}
		}
	}
}

func allStrings(a []any) ([]any, bool) {
	for _, e := range a {
		if _, ok := e.(string); !ok {
			return nil, false
		}
	}
	return a, true
}

func containsString(a []any, s string) bool {
	for _, e := range a {
		if e == s {
			return true
		}
	}
	return false
}

// jsonList writes values as a comma-separated JSON list for a description.
func jsonList(a []any) string {
	parts := make([]string, 0, len(a))
	for _, e := range a {
		b, err := json.Marshal(e)
		if err != nil {
			continue
		}
		parts = append(parts, string(b))
	}
	return strings.Join(parts, ", ")
}

// unescapePointer decodes a JSON Pointer token.
func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}
