package audioprobe

import "time"

// flac measures a native FLAC stream from its STREAMINFO block, which every FLAC file opens
// with: total samples over the sample rate, exact to the sample.
func (p *prober) flac() (time.Duration, error) {
	if _, err := p.skip(4); err != nil { // "fLaC"
		return 0, err
	}
	h, err := p.peek(4 + 34)
	if err != nil {
		return 0, err
	}
	if len(h) < 4+34 || h[0]&0x7F != 0 || be24(h[1:]) < 34 {
		return 0, malformed(FLAC, "no STREAMINFO block")
	}
	return streamInfo(FLAC, h[4:])
}

// streamInfo reads the duration from a FLAC STREAMINFO block b (34 bytes), which also opens
// FLAC in Ogg. A total of 0 means the encoder did not know it (a live stream), which leaves
// only the frames to count; that is refused rather than guessed.
func streamInfo(f Format, b []byte) (time.Duration, error) {
	rate := be24(b[10:]) >> 4
	total := uint64(b[13]&0x0F)<<32 | uint64(be32(b[14:]))
	if total == 0 {
		return 0, malformed(f, "STREAMINFO gives no sample count")
	}
	d, ok := samples(total, uint64(rate))
	if !ok {
		return 0, malformed(f, "sample rate %d", rate)
	}
	return d, nil
}
