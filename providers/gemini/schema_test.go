package gemini

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestSanitizeSchema(t *testing.T) {
	cases := []struct {
		name     string
		in       string
		ordering bool
		want     string // "null" for no schema
	}{
		{
			name: "MCP-style schema with rejected keywords",
			in: `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","additionalProperties":false,
				"properties":{"path":{"type":"string","minLength":1,"format":"uri"},"depth":{"type":"integer","exclusiveMinimum":0,"multipleOf":1},
				"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true}},"required":["path"]}`,
			want: `{"type":"OBJECT","properties":{"path":{"type":"STRING","minLength":1,"description":"Format: uri."},
				"depth":{"type":"INTEGER","minimum":0},"tags":{"type":"ARRAY","items":{"type":"STRING"}}},"required":["path"]}`,
		},
		{
			name: "refs inlined with sibling description, recursion cut",
			in: `{"type":"object","properties":{"a":{"$ref":"#/$defs/Addr","description":"home"},"n":{"$ref":"#/definitions/Node"}},
				"$defs":{"Addr":{"type":"object","description":"an address","properties":{"zip":{"type":"string"}}}},
				"definitions":{"Node":{"type":"object","properties":{"next":{"$ref":"#/definitions/Node"}}}}}`,
			want: `{"type":"OBJECT","properties":{"a":{"type":"OBJECT","description":"home","properties":{"zip":{"type":"STRING"}}},
				"n":{"type":"OBJECT","properties":{"next":{"type":"OBJECT"}}}}}`,
		},
		{
			name: "zod-style nullable anyOf and oneOf",
			in: `{"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"type":"null"}]},
				"y":{"oneOf":[{"type":"string"},{"type":"number"}]}}}`,
			want: `{"type":"OBJECT","properties":{"x":{"type":"STRING","nullable":true},
				"y":{"anyOf":[{"type":"STRING"},{"type":"NUMBER"}]}}}`,
		},
		{
			name: "allOf merged, const and non-string enums",
			in: `{"allOf":[{"type":"object","properties":{"a":{"const":"x"}},"required":["a"]},
				{"properties":{"b":{"type":"integer","enum":[1,2]},"c":{"const":3}},"required":["b","zzz"]}]}`,
			want: `{"type":"OBJECT","properties":{"a":{"type":"STRING","enum":["x"]},
				"b":{"type":"INTEGER","description":"Allowed values: 1, 2."},"c":{"description":"Value must be 3."}},"required":["a","b"]}`,
		},
		{
			name:     "property ordering for response schemas, nested",
			in:       `{"type":"object","properties":{"b":{"type":"object","properties":{"y":{"type":"string"},"x":{"type":"string"}}},"a":{"type":"string"}}}`,
			ordering: true,
			want: `{"type":"OBJECT","properties":{"b":{"type":"OBJECT","properties":{"y":{"type":"STRING"},"x":{"type":"STRING"}},"propertyOrdering":["y","x"]},
				"a":{"type":"STRING"}},"propertyOrdering":["b","a"]}`,
		},
		{
			name: "tuple items, examples, type inferred",
			in:   `{"properties":{"p":{"prefixItems":[{"type":"number"}],"examples":[[1]]}}}`,
			want: `{"type":"OBJECT","properties":{"p":{"type":"ARRAY","items":{"type":"NUMBER"},"example":[1]}}}`,
		},
		{name: "true schema", in: `true`, want: `null`},
		{name: "empty schema", in: `{}`, want: `null`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sanitizeSchema(json.RawMessage(tc.in), tc.ordering)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "null" {
				if got != nil {
					t.Fatalf("got %s, want no schema", b)
				}
				return
			}
			jsonEqual(t, b, tc.want)
		})
	}
}

func TestSanitizeSchemaKeepsKeyOrder(t *testing.T) {
	got, err := sanitizeSchema(json.RawMessage(`{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"string"},"m":{"type":"string"}}}`), false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if !strings.Contains(string(b), `"properties":{"z":`) || strings.Index(string(b), `"a":`) > strings.Index(string(b), `"m":`) {
		t.Errorf("property order lost: %s", b)
	}
}

func TestSanitizeSchemaLimits(t *testing.T) {
	deep := strings.Repeat(`{"type":"object","properties":{"a":`, 100) + `{}` + strings.Repeat(`}}`, 100)
	if _, err := sanitizeSchema(json.RawMessage(deep), false); err == nil {
		t.Error("a schema nested 100 deep was accepted")
	}
	// Each definition refers twice to the next: inlining doubles at every level.
	var defs []string
	for i := 0; i < 40; i++ {
		defs = append(defs, `"d`+strconv.Itoa(i)+`":{"anyOf":[{"$ref":"#/$defs/d`+strconv.Itoa(i+1)+`"},{"$ref":"#/$defs/d`+strconv.Itoa(i+1)+`"}]}`)
	}
	bomb := `{"$ref":"#/$defs/d0","$defs":{` + strings.Join(defs, ",") + `}}`
	if _, err := sanitizeSchema(json.RawMessage(bomb), false); err == nil {
		t.Error("an exponential $ref expansion was accepted")
	}
}
