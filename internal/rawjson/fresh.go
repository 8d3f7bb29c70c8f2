package rawjson

import "encoding/json"

// UnmarshalFresh is json.Unmarshal(body, dst) from a zero value: what a fast decoder left in
// *dst is replaced, as with *dst = T{} first. It decodes into a value of its own and copies
// it, so that dst does not escape through encoding/json's interface argument: a decoder
// that keeps its struct on the stack for the fast path (the common one) keeps it there, and
// only the rare slow path allocates. Neither is touched when it fails; *dst is then as the
// fast decoder left it.
func UnmarshalFresh[T any](body []byte, dst *T) error {
	v := new(T)
	if err := json.Unmarshal(body, v); err != nil {
		return err
	}
	*dst = *v
	return nil
}
