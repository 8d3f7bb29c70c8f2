package audioprobe

import (
	"bytes"
	"errors"
	"math"
	"time"
)

// errNoSync says the input does not open on MPEG audio frames: not an MP3 at all.
var errNoSync = errors.New("audioprobe: no mpeg audio frame")

// mpegFrame is one decoded MPEG audio frame header.
type mpegFrame struct {
	version int // 1, 2, or 25 for MPEG-2.5; 4 for AAC in ADTS
	layer   int // 1, 2 or 3; 0 for ADTS
	rate    int // samples a second
	size    int // bytes, header included
	samples int // samples a channel
	mono    bool
}

// Bitrates in kbit/s by [version is 1][layer-1][index].
var mpegBitrates = [2][3][15]int{
	{ // MPEG-2 and 2.5
		{0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256},
		{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
		{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
	},
	{ // MPEG-1
		{0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448},
		{0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384},
		{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320},
	},
}

var mpegRates = [3]int{44100, 48000, 32000} // MPEG-1; halved for 2, quartered for 2.5

// parseMPEG decodes a 4-byte MPEG audio frame header, checking what a decoder checks (the
// reserved emphasis value is not: ffmpeg plays such frames). Free-format frames (bitrate
// index 0) are not read: their length can only be found by searching for the next frame,
// and no encoder a user meets writes them; a stream of them is refused as junk.
func parseMPEG(b []byte) (mpegFrame, bool) {
	if len(b) < 4 || b[0] != 0xFF || b[1]&0xE0 != 0xE0 {
		return mpegFrame{}, false
	}
	if b[1]&0x06 == 0 { // layer "0": an ADTS header
		return parseADTS(b)
	}
	var f mpegFrame
	switch (b[1] >> 3) & 3 {
	case 0:
		f.version = 25
	case 2:
		f.version = 2
	case 3:
		f.version = 1
	default:
		return f, false
	}
	f.layer = 4 - int((b[1]>>1)&3)
	bi, ri := int(b[2]>>4), int((b[2]>>2)&3)
	if f.layer == 4 || bi == 0 || bi == 15 || ri == 3 {
		return f, false
	}
	v1 := 0
	if f.version == 1 {
		v1 = 1
	}
	bitrate := mpegBitrates[v1][f.layer-1][bi] * 1000
	f.rate = mpegRates[ri]
	switch f.version {
	case 2:
		f.rate /= 2
	case 25:
		f.rate /= 4
	}
	pad := int(b[2]>>1) & 1
	f.mono = b[3]>>6 == 3
	switch {
	case f.layer == 1:
		f.size, f.samples = (12*bitrate/f.rate+pad)*4, 384
	case f.layer == 2:
		f.size, f.samples = 144*bitrate/f.rate+pad, 1152
	case f.version == 1:
		f.size, f.samples = 144*bitrate/f.rate+pad, 1152
	default:
		f.size, f.samples = 72*bitrate/f.rate+pad, 576
	}
	return f, true
}

// adtsRates are the sampling frequencies by ADTS index.
var adtsRates = [13]int{96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350}

// parseADTS decodes the 7-byte header of an AAC frame in ADTS, the framing of raw .aac files
// (and of OpenAI's aac speech output). Each raw data block holds 1,024 samples.
func parseADTS(b []byte) (mpegFrame, bool) {
	if len(b) < headerLen || b[1]&0xF6 != 0xF0 {
		return mpegFrame{}, false
	}
	ri := int(b[2]>>2) & 0x0F
	size := int(b[3]&3)<<11 | int(b[4])<<3 | int(b[5]>>5)
	hdr := 7
	if b[1]&1 == 0 { // a CRC follows the header
		hdr = 9
	}
	if ri >= len(adtsRates) || size <= hdr {
		return mpegFrame{}, false
	}
	return mpegFrame{version: 4, rate: adtsRates[ri], size: size, samples: 1024 * (int(b[6]&3) + 1)}, true
}

// headerLen is how many bytes parseMPEG needs to decode any header (ADTS's 7).
const headerLen = 7

// sameStream says whether g can belong to the stream that f opened: a stream never changes
// version, layer or sample rate, which keeps stray 0xFF bytes in junk from counting as frames.
func (f mpegFrame) sameStream(g mpegFrame) bool {
	return f.version == g.version && f.layer == g.layer && f.rate == g.rate
}

// mp3 measures an MPEG audio stream (or AAC in ADTS, framed alike) by walking every frame
// header and adding up its samples, as a decoder plays them. A Xing, Info or VBRI header in
// the first frame counts the frames too, and its LAME tag records the encoder's delay and
// padding; but a header is only what its writer says, and frames after the count still
// play, so the count is used only when the walk finds no more (a file cut short). Junk
// between frames is skipped; tags at the end (ID3v1, APE, a trailing ID3v2) are skipped.
// limit is how far the first frame may be looked for.
func (p *prober) mp3(limit int) (time.Duration, Format, error) {
	first, _, err := p.syncMPEG(limit)
	if err != nil {
		return 0, MP3, err
	}
	f := MP3
	if first.layer == 0 {
		f = AAC
	}
	d, err := p.mpegFrames(first, f)
	return d, f, err
}

// mpegFrames measures the stream whose first frame, first, is at the reader. A frame of
// another stream (another rate, layer or version: a second file appended) is counted too,
// at its own rate, once the frame after it confirms it: a decoder resynchronises and plays
// it.
func (p *prober) mpegFrames(first mpegFrame, format Format) (time.Duration, error) {
	b, err := p.peek(min(first.size, bufSize))
	if err != nil {
		return 0, err
	}
	vbr := vbrHeader(b, first)
	var played mpegSamples
	if !vbr.info {
		played.add(first) // the Xing frame itself is silence
	}
	if _, err := p.skip(int64(first.size)); err != nil {
		return 0, err
	}
	cur := first
	lost := false          // junk was skipped: the next frame must be confirmed by the one after it
	var framed, junk int64 // the bytes of the frames counted, and those skipped between them
	for {
		h, err := p.peek(max(headerLen, 10))
		if err != nil {
			return 0, err
		}
		if len(h) < 4 {
			break
		}
		f, ok := parseMPEG(h)
		if ok && (lost || !cur.sameStream(f)) {
			if ok, err = p.confirmed(f); err != nil {
				return 0, err
			}
		}
		if ok {
			lost, cur = false, f
			played.add(f)
			framed += int64(f.size)
			if _, err := p.skip(int64(f.size)); err != nil {
				return 0, err
			}
			continue
		}
		if n, err := p.tagLength(h); err != nil {
			return 0, err
		} else if n > 0 {
			if _, err := p.skip(n); err != nil {
				return 0, err
			}
			continue
		}
		lost = true
		_, n, err := p.syncMPEG(-1)
		junk += n
		if err == errNoSync {
			break
		} else if err != nil {
			return 0, err
		}
	}
	if junk > maxMPEGJunk && junk > (framed+junk)/10 {
		// Free-format frames, or another codec's: a decoder may play what the walk skipped.
		return 0, refused(format, "%d of its bytes are not frames that could be measured", junk)
	}
	// The header's count is of the first stream's frames.
	i := played.at(first.rate)
	played[i].samples = max(played[i].samples, vbr.frames*uint64(first.samples))
	if vbr.trim < played[i].samples {
		played[i].samples -= vbr.trim
	}
	d, ok := played.duration()
	if !ok {
		return 0, malformed(format, "duration out of range")
	}
	return d, nil
}

// maxMPEGJunk is how many bytes an MPEG audio stream may hold that are neither frames nor
// tags (when they are also more than a tenth of it): encoders write none, but damaged files
// and stray padding have some.
const maxMPEGJunk = 64 << 10

// mpegSamples counts the samples played at each sample rate met (MPEG audio and ADTS have
// 14 between them).
type mpegSamples [16]struct {
	rate    int
	samples uint64
}

// at is the index of rate's count, taken if new.
func (s *mpegSamples) at(rate int) int {
	for i := range s {
		if s[i].rate == rate || s[i].rate == 0 {
			s[i].rate = rate
			return i
		}
	}
	return len(s) - 1 // unreachable: there are fewer rates
}

func (s *mpegSamples) add(f mpegFrame) { s[s.at(f.rate)].samples += uint64(f.samples) }

func (s *mpegSamples) duration() (time.Duration, bool) {
	var total time.Duration
	for _, r := range s {
		if r.rate == 0 {
			break
		}
		d, ok := samples(r.samples, uint64(r.rate))
		if !ok || total > math.MaxInt64-d {
			return 0, false
		}
		total += d
	}
	return total, true
}

// confirmed says whether the frame f at the reader is followed by another frame of its stream
// or by the end of the input.
func (p *prober) confirmed(f mpegFrame) (bool, error) {
	if f.size+headerLen > bufSize {
		return true, nil // an ADTS frame too long to look past; its header has to do
	}
	b, err := p.peek(f.size + headerLen)
	if err != nil {
		return false, err
	}
	switch {
	case len(b) < f.size:
		return false, nil // cut short by the end of the file
	case len(b) == f.size:
		return true, nil // the last frame of the file
	}
	g, ok := parseMPEG(b[f.size:])
	return ok && f.sameStream(g), nil
}

// syncMPEG moves the reader to the next frame header that its successor confirms, looking
// at most limit bytes ahead (-1: no limit; 0: the header must sit at the reader), and returns
// how many bytes it skipped.
func (p *prober) syncMPEG(limit int) (mpegFrame, int64, error) {
	scanned := 0
	for {
		b, err := p.peek(headerLen)
		if err != nil {
			return mpegFrame{}, int64(scanned), err
		}
		if len(b) < 4 {
			return mpegFrame{}, int64(scanned + len(b)), errNoSync
		}
		if f, ok := parseMPEG(b); ok {
			if ok, err := p.confirmed(f); err != nil {
				return mpegFrame{}, int64(scanned), err
			} else if ok {
				return f, int64(scanned), nil
			}
		}
		if limit >= 0 && scanned >= limit {
			return mpegFrame{}, int64(scanned), errNoSync
		}
		// Jump to the next 0xFF among the buffered bytes.
		b, err = p.peek(min(bufSize, max(p.br.Buffered(), 4)))
		if err != nil {
			return mpegFrame{}, int64(scanned), err
		}
		n := len(b)
		if i := bytes.IndexByte(b[1:], 0xFF); i >= 0 {
			n = i + 1
		}
		if limit >= 0 {
			n = min(n, limit-scanned)
		}
		scanned += n
		if _, err := p.skip(int64(n)); err != nil {
			return mpegFrame{}, int64(scanned), err
		}
	}
}

// tagLength returns the length of the tag at h, the reader's next bytes, or 0 when h opens
// none: ID3v1 ("TAG", 128 bytes), an APE tag with its header, or another ID3v2 tag.
func (p *prober) tagLength(h []byte) (int64, error) {
	switch {
	case len(h) >= 3 && string(h[:3]) == "TAG":
		return 128, nil
	case len(h) >= 10 && string(h[:3]) == "ID3" && h[3] < 0xFF && h[6]|h[7]|h[8]|h[9] < 0x80:
		return id3v2Length(h), nil
	case len(h) >= 8 && string(h[:8]) == "APETAGEX":
		b, err := p.peek(32)
		if err != nil || len(b) < 32 {
			return 32, err
		}
		// The size counts the items and the footer, not the header.
		return 32 + int64(le32(b[12:])), nil
	}
	return 0, nil
}

// id3v2Length is the length of the ID3v2 tag whose 10-byte header is h.
func id3v2Length(h []byte) int64 {
	n := int64(h[6])<<21 | int64(h[7])<<14 | int64(h[8])<<7 | int64(h[9])
	n += 10
	if h[5]&0x10 != 0 { // a footer follows
		n += 10
	}
	return n
}

// skipID3v2 skips the ID3v2 tags (there may be several) at the start of the input.
func (p *prober) skipID3v2() (bool, error) {
	found := false
	for {
		h, err := p.peek(max(headerLen, 10))
		if err != nil {
			return found, err
		}
		if len(h) < 10 || string(h[:3]) != "ID3" || h[3] == 0xFF || h[6]|h[7]|h[8]|h[9] >= 0x80 {
			return found, nil
		}
		found = true
		if _, err := p.skip(id3v2Length(h)); err != nil {
			return found, err
		}
	}
}

// vbrInfo is what a Xing, Info or VBRI header says: info, that its frame is such a header
// (and so holds no audio); frames, how many audio frames follow (0: it does not count them);
// trim, the samples of encoder delay and padding a LAME tag records, which a gapless
// decoder drops.
type vbrInfo struct {
	info   bool
	frames uint64
	trim   uint64
}

// vbrHeader reads the Xing, Info or VBRI header in the first frame b.
func vbrHeader(b []byte, f mpegFrame) vbrInfo {
	// The Xing header follows the side information, whose size depends on version and channels.
	off := 4 + 32
	switch {
	case f.version == 1 && f.mono:
		off = 4 + 17
	case f.version != 1 && !f.mono:
		off = 4 + 17
	case f.version != 1:
		off = 4 + 9
	}
	if f.layer == 3 && len(b) >= off+8 && (string(b[off:off+4]) == "Xing" || string(b[off:off+4]) == "Info") {
		flags := be32(b[off+4:])
		if flags&1 == 0 || len(b) < off+12 {
			return vbrInfo{info: true}
		}
		v := vbrInfo{info: true, frames: uint64(be32(b[off+8:]))}
		// The LAME tag follows the optional fields.
		lame := off + 12
		if flags&2 != 0 {
			lame += 4
		}
		if flags&4 != 0 {
			lame += 100
		}
		if flags&8 != 0 {
			lame += 4
		}
		if len(b) >= lame+24 {
			switch string(b[lame : lame+4]) {
			case "LAME", "Lavc", "Lavf":
				x := be24(b[lame+21:])
				v.trim = uint64(x>>12) + uint64(x&0xFFF)
			}
		}
		return v
	}
	if f.layer == 3 && len(b) >= 36+18 && string(b[36:40]) == "VBRI" {
		return vbrInfo{info: true, frames: uint64(be32(b[36+14:]))}
	}
	return vbrInfo{}
}
