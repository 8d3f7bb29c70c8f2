package audioprobe

import (
	"bytes"
	"time"
)

// flac measures a native FLAC stream by walking its frames, as a decoder plays them. The
// STREAMINFO block that every FLAC file opens with gives the sample rate and, when its writer
// could seek back to fill it in, the total: a header, so it counts only when the frames
// found are fewer (a file cut short, frames the walk could not follow).
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
	rate := streamInfoRate(h[4:])
	declared := streamInfoTotal(h[4:])
	walked, err := p.flacFrames()
	if err != nil {
		return 0, err
	}
	d, ok := samples(max(declared, walked), rate)
	if !ok {
		return 0, malformed(FLAC, "sample rate %d", rate)
	}
	return d, nil
}

// streamInfoTotal is the sample count of a FLAC STREAMINFO block b (34 bytes), which also
// opens FLAC in Ogg; 0 when the encoder did not know it (a live stream).
func streamInfoTotal(b []byte) uint64 {
	return uint64(b[13]&0x0F)<<32 | uint64(be32(b[14:]))
}

// streamInfoRate is the sample rate of a FLAC STREAMINFO block b.
func streamInfoRate(b []byte) uint64 { return uint64(be24(b[10:]) >> 4) }

// flacFrames walks the frames of a FLAC stream and returns their samples. Frame headers
// carry no length, so every sync code is tried, and a header whose CRC-8 holds is a frame in
// either of two readings; the longer counts:
//
//   - numbered: its number is the one expected next (the count of frames before it in a
//     fixed-size stream, the count of samples in a variable one), which a sync code inside
//     the audio data all but never matches. The numbering is the frames' own, not
//     STREAMINFO's block size, which a forged header could set to break the sequence;
//   - checked: the frame's CRC-16 holds up to the next header, which is how a decoder such
//     as ffmpeg finds and accepts frames, whatever their numbers say.
func (p *prober) flacFrames() (uint64, error) {
	var (
		frames, numbered uint64
		w                flacCRCWalk
	)
	for {
		// Look through what is buffered, refilling only when fewer bytes than a frame
		// header remain: peeking the whole buffer each time would move it at every step.
		b, err := p.peek(max(p.br.Buffered(), 16))
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			break
		}
		i := bytes.IndexByte(b, 0xFF)
		switch {
		case i < 0:
			i = len(b)
		case i == 0:
			// A frame header is at most 16 bytes, all in b unless the input ends first.
			if num, size, variable, ok := flacFrameHeader(b); ok {
				if variable && num == numbered || !variable && num == frames {
					frames++
					numbered += size
				}
				w.header(size)
			}
			i = 1
		}
		w.update(b[:i])
		if _, err := p.skip(int64(i)); err != nil {
			return 0, err
		}
	}
	w.header(0) // the end of the input ends the last frame
	return max(numbered, w.total), nil
}

// flacCRCWalk counts the samples of the frames whose CRC-16 holds. A header inside a frame's
// data may pass its CRC-8, so the frames begun at the last few headers are all followed:
// the earliest whose CRC-16 holds at the next header is the frame, and ends the others.
type flacCRCWalk struct {
	open [4]struct {
		crc  uint16
		size uint64
	}
	n     int
	total uint64
}

// header notes a header of a frame of size samples at the reader (size 0: the end).
func (w *flacCRCWalk) header(size uint64) {
	for _, f := range w.open[:w.n] {
		if f.crc == 0 {
			w.total += f.size
			w.n = 0
			break
		}
	}
	if size > 0 && w.n < len(w.open) {
		w.open[w.n].crc, w.open[w.n].size = 0, size
		w.n++
	}
}

// update runs the CRC-16 of each frame followed over b, the bytes at the reader.
func (w *flacCRCWalk) update(b []byte) {
	for k := range w.open[:w.n] {
		crc := w.open[k].crc
		for _, c := range b {
			crc = crc<<8 ^ uint16(flacCRC16[byte(crc>>8)^c])
		}
		w.open[k].crc = crc
	}
}

// flacCRC16 is the table of the CRC-16 that closes a FLAC frame: polynomial 0x8005, not
// reflected, initial value 0. A frame followed by its CRC checks to 0.
var flacCRC16 = crcTable(0x8005, 16)

// flacFrameHeader decodes the frame header at b and returns its number (of its first sample
// when variable, else of the frame) and its block size.
func flacFrameHeader(b []byte) (num, size uint64, variable, ok bool) {
	if len(b) < 6 || b[0] != 0xFF || b[1]&0xFE != 0xF8 || b[3]&1 != 0 || b[3]>>4 > 10 || b[2]&0x0F == 0x0F {
		return 0, 0, false, false
	}
	// The frame or sample number, coded like UTF-8 (up to 7 bytes for 36 bits).
	n := 4
	c := b[n]
	extra := 0
	switch {
	case c < 0x80:
		num = uint64(c)
	case c&0xE0 == 0xC0:
		num, extra = uint64(c&0x1F), 1
	case c&0xF0 == 0xE0:
		num, extra = uint64(c&0x0F), 2
	case c&0xF8 == 0xF0:
		num, extra = uint64(c&0x07), 3
	case c&0xFC == 0xF8:
		num, extra = uint64(c&0x03), 4
	case c&0xFE == 0xFC:
		num, extra = uint64(c&0x01), 5
	case c == 0xFE:
		num, extra = 0, 6
	default:
		return 0, 0, false, false
	}
	n++
	if len(b) < n+extra+4 {
		return 0, 0, false, false
	}
	for range extra {
		if b[n]&0xC0 != 0x80 {
			return 0, 0, false, false
		}
		num = num<<6 | uint64(b[n]&0x3F)
		n++
	}
	switch code := b[2] >> 4; {
	case code == 0:
		return 0, 0, false, false
	case code == 1:
		size = 192
	case code <= 5:
		size = 576 << (code - 2)
	case code == 6:
		size = uint64(b[n]) + 1
		n++
	case code == 7:
		size = uint64(be16(b[n:])) + 1
		n += 2
	default:
		size = 256 << (code - 8)
	}
	switch b[2] & 0x0F {
	case 12:
		n++
	case 13, 14:
		n += 2
	}
	if len(b) <= n || flacCRC8(b[:n]) != b[n] {
		return 0, 0, false, false
	}
	return num, size, b[1]&1 == 1, true
}

// flacCRC8 is the CRC-8 (polynomial 0x07) that closes a FLAC frame header.
func flacCRC8(b []byte) byte {
	var crc byte
	for _, c := range b {
		crc ^= c
		for range 8 {
			if crc&0x80 != 0 {
				crc = crc<<1 ^ 0x07
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
