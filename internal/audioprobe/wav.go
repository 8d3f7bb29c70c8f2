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

// ADPCM format tags, whose fmt chunk gives the samples of each block.
const (
	wavMSADPCM  = 2
	wavIMAADPCM = 0x11
)

// wavMaxRate is the highest sample rate a WAV may claim: 768 kHz is the most any converter
// records. A higher rate is a header written to shrink the bill, not audio.
const wavMaxRate = 768000

// wav measures a RIFF/WAVE or RF64 file: the data chunks' length over the frame size (or the
// fact chunk's sample count for compressed formats, unless the data holds far more at the
// byte rate). Chunks may come in any order: some writers put LIST or even data before fmt.
// Every chunk is walked to the end of the file, because a decoder plays each data chunk it
// meets: a streamed WAV carries a placeholder data size (0 or 0xFFFFFFFF), a truncated one a
// size larger than the file, and a forged one a size smaller than its samples with more data
// after it, so the bytes actually present are counted rather than trusted. Bytes after the
// last chunk that are not a chunk (another file's audio appended), or a chunk other than
// data that claims more bytes than the file has, refuse the file.
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
		perBlock                    uint32 // samples in each block of an ADPCM format
		ds64Data                    uint64
		factSamples                 uint64
		dataBytes                   uint64
	)
	for {
		h, err := p.peek(8)
		if err != nil {
			return 0, err
		}
		if len(h) < 8 {
			if err := p.onlyPadding(WAV); err != nil {
				return 0, err
			}
			break // the end, or a stray pad byte before it
		}
		if !isChunkID(h[:4]) {
			if err := p.onlyPadding(WAV); err != nil {
				return 0, err
			}
			break
		}
		id, size := string(h[:4]), le32(h[4:])
		if _, err := p.skip(8); err != nil {
			return 0, err
		}
		body := int64(size) + int64(size&1) // chunks are padded to even lengths
		claimed := int64(size)              // what must be there: a data chunk's is counted
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
			if (tag == wavMSADPCM || tag == wavIMAADPCM) && len(b) >= 20 {
				perBlock = le16(b[18:]) // after the extension's size
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
			dataBytes += uint64(n)
			haveData, claimed = true, 0
		}
		if n, err := p.skip(body); err != nil {
			return 0, err
		} else if n < claimed {
			// Whatever the chunk claims to cover may be audio a decoder reads past it.
			return 0, refused(WAV, "its %q chunk runs past the end of the file", id)
		}
	}
	switch {
	case !haveFmt:
		return 0, malformed(WAV, "no fmt chunk")
	case !haveData:
		return 0, malformed(WAV, "no data chunk")
	case rate == 0 || rate > wavMaxRate:
		return 0, refused(WAV, "its fmt chunk claims a sample rate of %d Hz", rate)
	}
	var d time.Duration
	ok := false
	switch {
	case align > 0 && (tag == wavPCM || tag == wavFloat || tag == wavALaw || tag == wavMuLaw || tag == wavExtensible):
		d, ok = samples(dataBytes/uint64(align), uint64(rate))
	case haveFact && factSamples > 0:
		d, ok = samples(factSamples, uint64(rate))
		// The fact chunk is a header too: data that plays markedly longer (an encoder's
		// last block is only partly filled) is billed what it plays.
		if played, ok2 := compressedLength(dataBytes, rate, byteRate, align, perBlock); ok && ok2 && played > d+max(d/10, time.Second) {
			d = played
		}
	default:
		d, ok = compressedLength(dataBytes, rate, byteRate, align, perBlock)
	}
	if !ok {
		return 0, malformed(WAV, "sample rate %d, byte rate %d", rate, byteRate)
	}
	return d, nil
}

// compressedLength is how long the data of a compressed format plays: its whole blocks
// times the samples a block holds when the format says (ADPCM), else its bytes over the
// byte rate.
func compressedLength(dataBytes uint64, rate, byteRate, align, perBlock uint32) (time.Duration, bool) {
	if perBlock > 0 && align > 0 {
		return samples(dataBytes/uint64(align)*uint64(perBlock), uint64(rate))
	}
	return samples(dataBytes, uint64(byteRate))
}

// isChunkID says whether b, four bytes, is a RIFF chunk ID: printable ASCII, as every
// writer's IDs are, which the frames of another container appended to the file are not.
func isChunkID(b []byte) bool {
	for _, c := range b[:4] {
		if c < 0x20 || c > 0x7E {
			return false
		}
	}
	return true
}

// onlyPadding reads the rest of the input and refuses it unless it is all zero bytes, which
// writers pad files with: anything else may be audio that a decoder would play and that the
// container's headers do not account for.
func (p *prober) onlyPadding(f Format) error {
	for {
		b, err := p.peek(bufSize)
		if err != nil {
			return err
		}
		if len(b) == 0 {
			return nil
		}
		for _, c := range b {
			if c != 0 {
				return refused(f, "the file holds data after its audio")
			}
		}
		if _, err := p.skip(int64(len(b))); err != nil {
			return err
		}
	}
}
