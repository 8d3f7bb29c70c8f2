package rawjson

// EachElement calls fn for every element of the JSON array data, in order, with the
// element's raw bytes; fn returns false to stop. data must be an array (ErrMalformed
// otherwise); like the rest of the package it expects well-formed JSON.
func EachElement(data []byte, fn func(elem []byte) bool) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return ErrMalformed
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return nil
	}
	for {
		end, err := skipValue(data, i)
		if err != nil {
			return err
		}
		if !fn(data[i:end]) {
			return nil
		}
		i = skipSpace(data, end)
		if i >= len(data) {
			return ErrMalformed
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			return nil
		default:
			return ErrMalformed
		}
	}
}
