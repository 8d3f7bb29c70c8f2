package audioprobe

import "time"

// WAV format tags whose data is whole frames of blockAlign bytes, so that the frame count,
// not the nominal byte rate, gives the exact duration.
const (
	wavPCM        = 1
	wavFloat      = 3
	wavALaw       = 6
	wavMuLaw      = 7
	wavExtensible = 0xFFFE
)

// wav measures a RIFF/WAVE or RF64 file: the data chunk's length over the frame size (or the
// fact chunk's sample count for compressed formats). Chunks may come in any order: some
// writers put LIST or even data before fmt. A streamed WAV carries a placeholder data size
// (0 or 0xFFFFFFFF) and a truncated one a size larger than the file, so the bytes actually
// present are counted rather than trusted.
func (p *prober) wav() (time.Duration, error) {
	head, err := p.peek(12)
	if err != nil {
		return 0, err
	}
	rf64 := string(head[:4]) == "RF64"
	if _, err := p.skip(12); err != nil {
		return 0, err
	}
	var (
		haveFmt, haveData, haveFact bool
		tag                         uint32
		rate, byteRate, align       uint32
		ds64Data                    uint64
		factSamples                 uint64
		dataBytes                   uint64
	)
	for !(haveFmt && haveData) {
		h, err := p.peek(8)
		if err != nil {
			return 0, err
		}
		if len(h) < 8 {
			break // the end, or a stray pad byte before it
		}
		id, size := string(h[:4]), le32(h[4:])
		if _, err := p.skip(8); err != nil {
			return 0, err
		}
		body := int64(size) + int64(size&1) // chunks are padded to even lengths
		switch id {
		case "fmt ":
			b, err := p.peek(min(int(size), 26))
			if err != nil {
				return 0, err
			}
			if len(b) < 16 {
				return 0, malformed(WAV, "fmt chunk of %d bytes", size)
			}
			tag, rate, byteRate, align = le16(b), le32(b[4:]), le32(b[8:]), le16(b[12:])
			if tag == wavExtensible && len(b) >= 26 {
				tag = le16(b[24:]) // the sub-format GUID opens with the plain format tag
			}
			haveFmt = true
		case "fact":
			if b, err := p.peek(min(int(size), 4)); err != nil {
				return 0, err
			} else if len(b) == 4 {
				factSamples, haveFact = uint64(le32(b)), true
			}
		case "ds64":
			// RF64 keeps the real 64-bit sizes here: RIFF size, data size, sample count.
			if b, err := p.peek(min(int(size), 24)); err != nil {
				return 0, err
			} else if len(b) >= 16 {
				ds64Data = le64(b[8:])
				if len(b) >= 24 && le64(b[16:]) != 0 {
					factSamples, haveFact = le64(b[16:]), true
				}
			}
		case "data":
			declared := int64(size)
			if rf64 && size == 0xFFFFFFFF {
				declared = int64(min(ds64Data, 1<<62))
			}
			var n int64
			if declared == 0 || (!rf64 && size == 0xFFFFFFFF) {
				// A placeholder: the data runs to the end of the file.
				n, err = p.skipAll()
				body = 0
			} else {
				n, err = p.skip(declared)
				body = declared & 1 // the pad byte, if the data was all there
			}
			if err != nil {
				return 0, err
			}
			dataBytes, haveData = uint64(n), true
		}
		if _, err := p.skip(body); err != nil {
			return 0, err
		}
	}
	switch {
	case !haveFmt:
		return 0, malformed(WAV, "no fmt chunk")
	case !haveData:
		return 0, malformed(WAV, "no data chunk")
	}
	var d time.Duration
	ok := false
	switch {
	case align > 0 && (tag == wavPCM || tag == wavFloat || tag == wavALaw || tag == wavMuLaw || tag == wavExtensible):
		d, ok = samples(dataBytes/uint64(align), uint64(rate))
	case haveFact && factSamples > 0:
		d, ok = samples(factSamples, uint64(rate))
	default:
		// A compressed format without a fact chunk: its byte rate is all there is.
		d, ok = samples(dataBytes, uint64(byteRate))
	}
	if !ok {
		return 0, malformed(WAV, "sample rate %d, byte rate %d", rate, byteRate)
	}
	return d, nil
}
