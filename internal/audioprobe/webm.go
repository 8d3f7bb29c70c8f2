package audioprobe

import (
	"bytes"
	"math"
	"time"
)

// Matroska element IDs, their length markers kept, as the specification writes them.
const (
	ebmlHeader      = 0x1A45DFA3
	mkvSegment      = 0x18538067
	mkvInfo         = 0x1549A966
	mkvScale        = 0x2AD7B1 // TimestampScale, ns a tick
	mkvDuration     = 0x4489   // float, in ticks
	mkvTracks       = 0x1654AE6B
	mkvTrackEntry   = 0xAE
	mkvTrackNumber  = 0xD7
	mkvTrackType    = 0x83 // 2: audio
	mkvCodecID      = 0x86
	mkvDefaultDur   = 0x23E383 // ns
	mkvCluster      = 0x1F43B675
	mkvTimestamp    = 0xE7 // the cluster's, in ticks
	mkvSimpleBlock  = 0xA3
	mkvBlockGroup   = 0xA0
	mkvBlock        = 0xA1
	mkvBlockDur     = 0x9B // ticks
	mkvAudio        = 0xE1
	mkvSampleRate   = 0xB5 // float, Hz
	mkvChannels     = 0x9F
	mkvBitDepth     = 0x6264
	mkvTrackOpus    = "A_OPUS"
	mkvAudioTrack   = 2
	mkvUnknownSize  = -1
	mkvMaxBlockHead = 16
)

// webmState is what the elements read so far say.
type webmState struct {
	scale    uint64  // ns a tick
	duration float64 // Info's, in ticks; 0 when absent

	// The TrackEntry being read, and the audio tracks.
	entryNum, entryType, entryDefault uint64
	entryCodec                        webmCodec
	entryRate                         float64
	entryChannels, entryBits          uint64
	tracks                            [8]webmTrack
	ntracks                           int

	cluster uint64 // the cluster's timestamp, in ticks
	last    int    // the index of the track of the last block read, -1 if not audio
}

// webmCodec names the codecs whose blocks say how long they play.
type webmCodec uint8

const (
	codecOther webmCodec = iota
	codecOpus            // each packet's TOC byte says
	codecAAC             // 1,024 samples a frame
	codecPCM             // its bytes over the frame size
)

// webmCodecOf is the codec of a CodecID.
func webmCodecOf(id []byte) webmCodec {
	switch {
	case string(id) == mkvTrackOpus:
		return codecOpus
	case bytes.HasPrefix(id, []byte("A_AAC")):
		return codecAAC
	case bytes.HasPrefix(id, []byte("A_PCM/")):
		return codecPCM
	}
	return codecOther
}

// webmTrack is an audio track and what its blocks say.
type webmTrack struct {
	number, defaultDur uint64
	codec              webmCodec
	rate               float64 // Hz
	frameBytes         uint64  // PCM: the bytes of a sample of every channel
	blockStart         int64   // ns, the last block's start; -1 before the first
	end                int64   // ns, the end of the last block
	spacing            int64   // ns between the last two blocks: a guess at a block's length
	played             int64   // ns, the lengths of the blocks that know theirs, added up
}

// length is how long the track plays: to the end of its last block, or the lengths of its
// blocks added up when longer.
func (t *webmTrack) length() int64 { return max(t.end, t.played) }

// webm measures a WebM or Matroska file from the blocks of its audio tracks (the longest,
// whichever a decoder picks), read to the end of the file: the end of the last one (a
// browser's MediaRecorder writes no duration and clusters of unknown size), or the lengths
// of all of them added up when longer, since a decoder plays every block whatever its
// timestamp says. A block's length is its BlockDuration, the track's default duration or
// what the block says it plays (Opus by its TOC byte, AAC by its 1,024 samples, PCM by its
// bytes), the longest.
// The Info element's duration is a header: it counts only when longer than the blocks, or
// when there are none. Master elements are read as a flat sequence, their sizes ignored, so
// that unknown sizes need no special case.
func (p *prober) webm() (time.Duration, error) {
	s := webmState{scale: 1e6, last: -1}
	for {
		id, size, ok, err := p.ebmlHeader()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		switch id {
		case mkvSegment, mkvInfo, mkvTracks, mkvAudio, mkvCluster, mkvBlockGroup:
			if id == mkvCluster {
				s.endEntry()
			}
			continue // descend: read the children in line
		case mkvTrackEntry:
			s.endEntry()
			s.entryNum, s.entryType, s.entryDefault, s.entryCodec = 0, 0, 0, codecOther
			s.entryRate, s.entryChannels, s.entryBits = 0, 1, 0
			continue
		}
		if size == mkvUnknownSize {
			return 0, malformed(WebM, "element %#x of unknown size", id)
		}
		n := int(min(size, mkvMaxBlockHead))
		b, err := p.peek(n)
		if err != nil {
			return 0, err
		}
		if len(b) < n {
			break
		}
		switch id {
		case mkvScale:
			if v := ebmlUint(b); v > 0 {
				s.scale = v
			}
		case mkvDuration:
			s.duration = ebmlFloat(b)
		case mkvTrackNumber:
			s.entryNum = ebmlUint(b)
		case mkvTrackType:
			s.entryType = ebmlUint(b)
		case mkvCodecID:
			s.entryCodec = webmCodecOf(b)
		case mkvSampleRate:
			s.entryRate = ebmlFloat(b)
		case mkvChannels:
			s.entryChannels = ebmlUint(b)
		case mkvBitDepth:
			s.entryBits = ebmlUint(b)
		case mkvDefaultDur:
			s.entryDefault = ebmlUint(b)
		case mkvTimestamp:
			s.cluster = ebmlUint(b)
		case mkvSimpleBlock, mkvBlock:
			s.block(b, size)
		case mkvBlockDur:
			if s.last >= 0 {
				t := &s.tracks[s.last]
				t.end = max(t.end, t.blockStart+int64(min(ebmlUint(b)*s.scale, math.MaxInt64/2)))
			}
		}
		if _, err := p.skip(size); err != nil {
			return 0, err
		}
	}
	var declared time.Duration
	if s.duration > 0 && s.duration*float64(s.scale) < math.MaxInt64/2 {
		declared = time.Duration(math.Round(s.duration * float64(s.scale)))
	}
	if s.ntracks == 0 && declared == 0 {
		return 0, malformed(WebM, "no audio track")
	}
	var longest int64
	for i := range s.tracks[:s.ntracks] {
		longest = max(longest, s.tracks[i].length())
	}
	return max(declared, time.Duration(longest)), nil
}

// endEntry takes the TrackEntry just read as an audio track if it is one.
func (s *webmState) endEntry() {
	if s.entryType == mkvAudioTrack && s.entryNum > 0 && s.ntracks < len(s.tracks) && s.track(s.entryNum) < 0 {
		s.tracks[s.ntracks] = webmTrack{number: s.entryNum, defaultDur: s.entryDefault, codec: s.entryCodec, rate: s.entryRate,
			frameBytes: min(s.entryChannels, 1<<10) * (min(s.entryBits, 1<<10) / 8), blockStart: -1}
		s.ntracks++
	}
}

// track is the index of the audio track numbered n, -1 if there is none.
func (s *webmState) track(n uint64) int {
	for i := range s.tracks[:s.ntracks] {
		if s.tracks[i].number == n {
			return i
		}
	}
	return -1
}

// block reads the head b of a SimpleBlock or Block of size bytes: track number, timestamp
// relative to the cluster, flags, then the first bytes of the frame.
func (s *webmState) block(b []byte, size int64) {
	number, n := ebmlVint(b)
	s.last = -1
	i := s.track(number)
	if n == 0 || i < 0 || len(b) < n+3 {
		return
	}
	t := &s.tracks[i]
	rel := int64(int16(be16(b[n:])))
	ticks := int64(min(s.cluster, math.MaxInt64/4)) + rel
	start := ticks * int64(min(s.scale, 1<<32))
	if ticks < 0 || start/int64(min(s.scale, 1<<32)) != ticks {
		return
	}
	var length int64
	frames := int64(1)
	if b[n+2]&0x06 != 0 && len(b) > n+3 { // laced: a count of frames, less one, opens the data
		frames = int64(b[n+3]) + 1
	}
	if t.defaultDur > 0 {
		length = int64(min(t.defaultDur, 1<<40))
	}
	// Some codecs' blocks say how long they play, whatever the track's default claims. The
	// frames of a laced Opus block lie beyond what is read of it: each is taken to play the
	// most an Opus packet can (no muxer in use laces Opus).
	switch {
	case t.codec == codecOpus && frames == 1 && len(b) > n+3:
		length = max(length, opusPacketLength(b[n+3:]))
	case t.codec == codecOpus:
		length = max(length, opusMaxPacket)
	case t.codec == codecAAC && t.rate >= 1:
		length = max(length, int64(1024*float64(time.Second)/t.rate))
	case t.codec == codecPCM && t.rate >= 1 && t.frameBytes > 0 && frames == 1:
		pcm := uint64(max(size-int64(n+3), 0)) / t.frameBytes
		length = max(length, int64(min(float64(pcm)*float64(time.Second)/t.rate, math.MaxInt64/4)))
	}
	t.played = min(t.played+length*frames, math.MaxInt64/2)
	if length == 0 && t.blockStart >= 0 {
		length = t.spacing
	}
	if t.blockStart >= 0 && start > t.blockStart {
		t.spacing = start - t.blockStart
	}
	t.blockStart, s.last = start, i
	t.end = max(t.end, start+length)
}

// opusMaxPacket is the longest an Opus packet plays, in ns (RFC 6716 section 3.2.5).
const opusMaxPacket = 120 * int64(time.Millisecond)

// opusPacketSamples is how many 48 kHz samples an Opus packet plays (see opusPacketLength).
func opusPacketSamples(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(opusPacketLength(b) * 48000 / int64(time.Second))
}

// opusPacketLength is how long an Opus packet plays, in ns, from its TOC byte (RFC 6716
// section 3.1): the frame size of its configuration times its frame count.
func opusPacketLength(b []byte) int64 {
	toc := b[0]
	config := int(toc >> 3)
	var frame int64 // in tenths of a millisecond
	switch {
	case config < 12:
		frame = [4]int64{100, 200, 400, 600}[config%4]
	case config < 16:
		frame = [2]int64{100, 200}[config%2]
	default:
		frame = [4]int64{25, 50, 100, 200}[config%4]
	}
	count := int64(1)
	switch toc & 3 {
	case 1, 2:
		count = 2
	case 3:
		if len(b) < 2 {
			return 0
		}
		count = int64(b[1] & 0x3F)
	}
	return frame * count * 100_000
}

// ebmlHeader reads an element's ID (its length marker kept) and size (mkvUnknownSize when
// all its bits are ones). ok is false at the end of the input.
func (p *prober) ebmlHeader() (id uint32, size int64, ok bool, err error) {
	b, err := p.peek(12)
	if err != nil {
		return 0, 0, false, err
	}
	if len(b) < 2 {
		return 0, 0, false, nil
	}
	idLen := vintLength(b[0])
	if idLen == 0 || idLen > 4 || len(b) < idLen+1 {
		return 0, 0, false, malformed(WebM, "bad element ID")
	}
	for _, c := range b[:idLen] {
		id = id<<8 | uint32(c)
	}
	v, n := ebmlVint(b[idLen:])
	if n == 0 {
		return 0, 0, false, malformed(WebM, "bad element size")
	}
	size = int64(min(v, 1<<62))
	if v == 1<<(7*n)-1 {
		size = mkvUnknownSize
	}
	if _, err := p.skip(int64(idLen + n)); err != nil {
		return 0, 0, false, err
	}
	return id, size, true, nil
}

// vintLength is the length of the variable-size integer that opens with c: one more than
// its leading zero bits; 0 when c is 0.
func vintLength(c byte) int {
	for i := range 8 {
		if c&(0x80>>i) != 0 {
			return i + 1
		}
	}
	return 0
}

// ebmlVint decodes a variable-size integer, its length marker removed, and returns it with
// its length (0 when b does not hold one).
func ebmlVint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	n := vintLength(b[0])
	if n == 0 || len(b) < n {
		return 0, 0
	}
	v := uint64(b[0]) & (0xFF >> n)
	for _, c := range b[1:n] {
		v = v<<8 | uint64(c)
	}
	return v, n
}

// ebmlUint decodes an unsigned integer element of up to 8 bytes.
func ebmlUint(b []byte) uint64 {
	var v uint64
	for _, c := range b[:min(len(b), 8)] {
		v = v<<8 | uint64(c)
	}
	return v
}

// ebmlFloat decodes a float element (4 or 8 bytes); anything else or a value that is not
// a positive finite number reads as 0.
func ebmlFloat(b []byte) float64 {
	var f float64
	switch len(b) {
	case 4:
		f = float64(math.Float32frombits(be32(b)))
	case 8:
		f = math.Float64frombits(be64(b))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0
	}
	return f
}
