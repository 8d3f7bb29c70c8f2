package wiretest

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

type outer struct {
	Name   string          `json:"name"`
	Inner  *inner          `json:"inner"`
	Items  []inner         `json:"items"`
	Count  selfDecoded     `json:"count"`
	Anon   struct{ X int } `json:"anon"`
	Next   *outer          `json:"next"`
	hidden inner
}

type inner struct {
	Text string          `json:"text"`
	Raw  json.RawMessage `json:"raw"`
	On   bool            `json:"on"`
	F    *float64        `json:"f"`
}

// selfDecoded decodes itself: its fields are its own business.
type selfDecoded struct{ N int64 }

func (s *selfDecoded) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.N) }

func TestCoverageNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		naming Naming
		want   []string
	}{
		{"by path", ByPath, []string{
			"outer.Name", "outer.Inner", "outer.Inner.Text", "outer.Inner.Raw", "outer.Inner.On", "outer.Inner.F",
			"outer.Items", "outer.Items.Text", "outer.Items.Raw", "outer.Items.On", "outer.Items.F",
			"outer.Count", "outer.Anon", "outer.Anon.X", "outer.Next",
		}},
		{"by type", ByType, []string{
			"outer.Name", "outer.Inner", "inner.Text", "inner.Raw", "inner.On", "inner.F",
			"outer.Items", "outer.Count", "outer.Anon", "outer.Anon.X", "outer.Next",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewCoverage(tc.naming, reflect.TypeFor[outer]()).Unset(); !slices.Equal(got, tc.want) {
				t.Errorf("fields\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestCoverageMark(t *testing.T) {
	var v outer
	if err := json.Unmarshal([]byte(`{"name":"a","items":[{},{"text":"t"}],"next":{"inner":{"on":true}}}`), &v); err != nil {
		t.Fatal(err)
	}
	byPath := NewCoverage(ByPath, reflect.TypeFor[outer]())
	byPath.Mark(&v)
	want := []string{"outer.Inner", "outer.Inner.Text", "outer.Inner.Raw", "outer.Inner.On", "outer.Inner.F",
		"outer.Items.Raw", "outer.Items.On", "outer.Items.F", "outer.Count", "outer.Anon", "outer.Anon.X"}
	if got := byPath.Unset(); !slices.Equal(got, want) {
		t.Errorf("by path, unset\n%q\nwant\n%q", got, want)
	}
	// By type, next.inner.on covers inner.On wherever an inner is held.
	byType := NewCoverage(ByType, reflect.TypeFor[outer]())
	byType.Mark([]outer{v})
	want = []string{"inner.Raw", "inner.F", "outer.Count", "outer.Anon", "outer.Anon.X"}
	if got := byType.Unset(); !slices.Equal(got, want) {
		t.Errorf("by type, unset\n%q\nwant\n%q", got, want)
	}
}

// TestFillSetsEveryField: a filled value sets every field it lists, and json.Marshal
// writes it.
func TestFillSetsEveryField(t *testing.T) {
	type wire struct {
		Inner   inner    `json:"inner"`
		Ptrs    []*inner `json:"ptrs"`
		N       int64    `json:"n"`
		Strings []string `json:"strings,omitempty"`
	}
	var v wire
	Fill(reflect.ValueOf(&v).Elem(), "s", nil)
	cov := NewCoverage(ByPath, reflect.TypeFor[wire]())
	cov.Mark(v)
	if unset := cov.Unset(); len(unset) > 0 {
		t.Errorf("Fill left %q unset: %+v", unset, v)
	}
	if _, err := json.Marshal(v); err != nil {
		t.Errorf("json.Marshal of a filled value: %v", err)
	}
	Fill(reflect.ValueOf(&v).Elem(), "s", func() []byte { return []byte("raw") })
	if string(v.Ptrs[1].Raw) != "raw" {
		t.Errorf("raw values %q, want the raw function's", v.Ptrs[1].Raw)
	}
}
