package audioprobe

import (
	"math/bits"
	"time"
)

// isMP4Start says whether head opens an ISO base media (MP4, M4A) or QuickTime file: a box
// header with one of the types such files begin with.
func isMP4Start(head []byte) bool {
	switch string(head[4:8]) {
	case "ftyp", "moov", "mdat", "free", "skip", "wide", "pnot", "styp":
		size := be32(head)
		return size == 0 || size == 1 || size >= 8
	}
	return false
}

// mp4Info collects what the boxes say about the duration.
type mp4Info struct {
	movieScale    uint32 // mvhd
	movieDuration uint64
	mehd          uint64 // mvex/mehd: a fragmented file's length, in the movie's timescale
	fragmented    bool   // moov has an mvex: the samples are in moof boxes

	// The track being read.
	handler    [4]byte
	trackID    uint32
	trackScale uint32
	trackDur   uint64
	edited     uint64 // the track's edit list: its presented length, in the movie's timescale
	editOK     bool
	sampled    uint64 // the durations of its samples (stts), added up, in its timescale

	// The longest of the whole file's sound tracks: a decoder may pick any.
	longestSound time.Duration

	// Fragments: trex default durations by track, the traf being read, then what the
	// fragments of each sound track add up to.
	trex     [8][2]uint32
	trafID   uint32
	trafDur  uint32 // default sample duration
	trafBase uint64 // tfdt
	trafHas  bool
	trafSum  uint64
	frags    [8]mp4Frags
	nfrags   int
}

// mp4 measures an MP4 or M4A file from its sound tracks (the longest, whichever a decoder
// picks), reading every box to the end of the file. A whole file has a moov box, before or
// after the media data, whose sample table lists every sample's duration (stts): a decoder
// plays those samples, so their sum counts, or the media header's duration (mdhd) when
// longer; an edit list trims the encoder's priming off either. A fragmented file (Safari's
// recorder, ffmpeg into a pipe) has an empty moov and the samples in moof boxes: each
// track's fragments are followed to the end of the last (by its tfdt decode time) and added
// up, and the longer reading counts, since a forged decode time can put every fragment at
// 0. Without a sound track's length, the movie's (mvhd, else mvex/mehd) is used. mdat and
// the like are skipped, by seeking when the input can.
func (p *prober) mp4() (time.Duration, error) {
	var m mp4Info
	found := false
	for {
		typ, _, payload, ok, err := p.mp4Box(-1)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		switch typ {
		case "moov":
			if err := p.mp4Boxes(payload, 1, &m); err != nil {
				return 0, err
			}
			found = true
			continue
		case "moof":
			if err := p.mp4Boxes(payload, 1, &m); err != nil {
				return 0, err
			}
			continue
		}
		if payload < 0 {
			break // runs to the end of the file
		}
		if _, err := p.skip(payload); err != nil {
			return 0, err
		}
	}
	if !found {
		return 0, malformed(MP4, "no moov box")
	}
	return m.duration()
}

// maxEditTrim is the most media an edit list may cut off the audio track, in the track's
// samples: an encoder's priming and padding (2,112 and under 1,024 samples for AAC), never
// the audio itself, which a forged edit list would cut to shrink the bill.
const maxEditTrim = 2112 + 1024

// mp4Frags is what the fragments of one sound track say, in its timescale.
type mp4Frags struct {
	id, scale   uint32
	cursor, end uint64 // where the last fragment ended, and the furthest any did
	played      uint64 // the fragments' samples, added up
	seen        bool
}

func (m *mp4Info) duration() (time.Duration, error) {
	longest := m.longestSound
	for _, f := range m.frags[:m.nfrags] {
		if d, ok := samples(max(f.end, f.played), uint64(f.scale)); ok && f.seen {
			longest = max(longest, d)
		}
	}
	var (
		d  time.Duration
		ok bool
	)
	switch {
	case longest > 0:
		d, ok = longest, true
	case known(m.movieDuration) && m.movieScale > 0:
		d, ok = samples(m.movieDuration, uint64(m.movieScale))
	case known(m.mehd) && m.movieScale > 0:
		d, ok = samples(m.mehd, uint64(m.movieScale))
	default:
		return 0, malformed(MP4, "no duration in moov")
	}
	if !ok {
		return 0, malformed(MP4, "duration out of range")
	}
	return d, nil
}

// presented is how long media samples at scale play once an edit list presenting edited
// (in the movie's timescale) has trimmed the encoder's priming and padding off them.
func (m *mp4Info) presented(media uint64, scale uint32, edited uint64, editOK bool) (time.Duration, bool) {
	d, ok := samples(media, uint64(scale))
	if ok && editOK && m.movieScale > 0 {
		if e, eok := samples(edited, uint64(m.movieScale)); eok && e < d {
			if trim, _ := samples(maxEditTrim, uint64(scale)); d-e <= trim {
				d = e
			}
		}
	}
	return d, ok
}

// known says whether a duration field holds a duration: 0 and all ones both mean unknown.
func known(d uint64) bool {
	return d != 0 && d != 0xFFFFFFFF && d != ^uint64(0)
}

// mp4Box reads a box header and returns the box's type and the length of its payload, -1
// when it runs to the end of its parent. limit is the bytes left in the parent (-1: the
// file). hdr is the length of the header, which the reader is past on return; ok is false at
// the end of the parent.
func (p *prober) mp4Box(limit int64) (typ string, hdr, payload int64, ok bool, err error) {
	if limit >= 0 && limit < 8 {
		_, err := p.skip(limit)
		return "", 0, 0, false, err
	}
	h, err := p.peek(16)
	if err != nil {
		return "", 0, 0, false, err
	}
	if len(h) < 8 {
		_, err := p.skip(int64(len(h)))
		return "", 0, 0, false, err
	}
	size := uint64(be32(h))
	hdr = 8
	typ = mp4Type(h[4:8])
	switch size {
	case 0:
		payload = -1
		if limit >= 0 {
			payload = limit - hdr
		}
	case 1:
		if len(h) < 16 {
			return "", 0, 0, false, malformed(MP4, "truncated %q box header", typ)
		}
		size, hdr = be64(h[8:]), 16
	}
	if size != 0 {
		if size < uint64(hdr) || size > 1<<62 || (limit >= 0 && int64(size) > limit) {
			return "", 0, 0, false, malformed(MP4, "%q box of %d bytes", typ, size)
		}
		payload = int64(size) - hdr
	}
	if _, err := p.skip(hdr); err != nil {
		return "", 0, 0, false, err
	}
	return typ, hdr, payload, true, nil
}

// mp4Type returns the box type without allocating, for the types this file looks into.
func mp4Type(b []byte) string {
	switch string(b) {
	case "moov":
		return "moov"
	case "trak":
		return "trak"
	case "mdia":
		return "mdia"
	case "mvex":
		return "mvex"
	case "edts":
		return "edts"
	case "moof":
		return "moof"
	case "traf":
		return "traf"
	case "mvhd":
		return "mvhd"
	case "tkhd":
		return "tkhd"
	case "mdhd":
		return "mdhd"
	case "hdlr":
		return "hdlr"
	case "elst":
		return "elst"
	case "mehd":
		return "mehd"
	case "trex":
		return "trex"
	case "tfhd":
		return "tfhd"
	case "tfdt":
		return "tfdt"
	case "trun":
		return "trun"
	case "minf":
		return "minf"
	case "stbl":
		return "stbl"
	case "stts":
		return "stts"
	}
	return "other"
}

// mp4Boxes reads the children of a container box of n payload bytes, descending only into
// the boxes on the way to a duration.
func (p *prober) mp4Boxes(n int64, depth int, m *mp4Info) error {
	if n < 0 {
		n = 1 << 62 // a box running to the end of the file
	}
	for {
		typ, hdr, payload, ok, err := p.mp4Box(n)
		if err != nil || !ok {
			return err
		}
		n -= hdr + payload
		var b []byte
		switch typ {
		case "trak", "mdia", "minf", "stbl", "mvex", "edts", "traf":
			if depth > 5 {
				break
			}
			m.open(typ)
			if err := p.mp4Boxes(payload, depth+1, m); err != nil {
				return err
			}
			m.close(typ)
			continue
		case "trun":
			if err := p.trun(payload, m); err != nil {
				return err
			}
			continue
		case "stts":
			if err := p.stts(payload, m); err != nil {
				return err
			}
			continue
		case "mvhd", "tkhd", "mdhd", "hdlr", "mehd", "trex", "tfhd", "tfdt":
			if b, err = p.peek(int(min(payload, 32))); err != nil {
				return err
			}
		case "elst":
			if b, err = p.peek(int(min(payload, bufSize))); err != nil {
				return err
			}
		}
		m.leaf(typ, b)
		if _, err := p.skip(payload); err != nil {
			return err
		}
	}
}

// open resets the state of a track or track fragment about to be read.
func (m *mp4Info) open(typ string) {
	switch typ {
	case "trak":
		m.handler, m.trackID, m.trackScale, m.trackDur, m.edited, m.editOK, m.sampled = [4]byte{}, 0, 0, 0, 0, false, 0
	case "mvex":
		m.fragmented = true
	case "traf":
		m.trafID, m.trafDur, m.trafBase, m.trafHas, m.trafSum = 0, 0, 0, false, 0
	}
}

// close takes what a track or track fragment said once it is read.
func (m *mp4Info) close(typ string) {
	switch typ {
	case "trak":
		if string(m.handler[:]) != "soun" || m.trackScale == 0 {
			return
		}
		media := m.sampled
		if known(m.trackDur) {
			media = max(media, m.trackDur)
		}
		if d, ok := m.presented(media, m.trackScale, m.edited, m.editOK); ok {
			m.longestSound = max(m.longestSound, d)
		}
		if m.nfrags < len(m.frags) {
			m.frags[m.nfrags] = mp4Frags{id: m.trackID, scale: m.trackScale}
			m.nfrags++
		}
	case "traf":
		for i := range m.frags[:m.nfrags] {
			if f := &m.frags[i]; f.id == m.trafID {
				// A fragment starts at its tfdt decode time, or where the previous one ended.
				start := f.cursor
				if m.trafHas {
					start = m.trafBase
				}
				f.cursor = min(start+m.trafSum, 1<<62)
				f.end = max(f.end, f.cursor)
				f.played = min(f.played+m.trafSum, 1<<62)
				f.seen = true
				return
			}
		}
	}
}

// leaf reads the first bytes b of a box that is not a container.
func (m *mp4Info) leaf(typ string, b []byte) {
	switch typ {
	case "mvhd":
		m.movieScale, m.movieDuration = fullBoxTime(b)
	case "mdhd":
		m.trackScale, m.trackDur = fullBoxTime(b)
	case "tkhd":
		switch {
		case len(b) >= 24 && b[0] == 1:
			m.trackID = be32(b[20:])
		case len(b) >= 16 && b[0] == 0:
			m.trackID = be32(b[12:])
		}
	case "hdlr":
		if len(b) >= 12 {
			copy(m.handler[:], b[8:12])
		}
	case "elst":
		m.edited, m.editOK = editLength(b)
	case "mehd":
		m.mehd, _ = fullBoxValue(b)
	case "trex":
		if len(b) >= 16 {
			for i := range m.trex {
				if m.trex[i][0] == 0 || m.trex[i][0] == be32(b[4:]) {
					m.trex[i] = [2]uint32{be32(b[4:]), be32(b[12:])}
					break
				}
			}
		}
	case "tfhd":
		if len(b) < 8 {
			return
		}
		flags := be24(b[1:])
		m.trafID = be32(b[4:])
		for _, t := range m.trex {
			if t[0] == m.trafID {
				m.trafDur = t[1]
			}
		}
		off := 8
		if flags&0x01 != 0 { // base data offset
			off += 8
		}
		if flags&0x02 != 0 { // sample description index
			off += 4
		}
		if flags&0x08 != 0 && len(b) >= off+4 {
			m.trafDur = be32(b[off:])
		}
	case "tfdt":
		m.trafBase, m.trafHas = fullBoxValue(b)
	}
}

// trun adds up the sample durations of a track run box of n payload bytes, reading its
// sample table through the buffer: a run may list thousands of samples.
func (p *prober) trun(n int64, m *mp4Info) error {
	b, err := p.peek(int(min(n, 16)))
	if err != nil {
		return err
	}
	if len(b) < 8 {
		_, err := p.skip(n)
		return err
	}
	flags, count := be24(b[1:]), int64(be32(b[4:]))
	head := int64(8)
	if flags&0x01 != 0 { // data offset
		head += 4
	}
	if flags&0x04 != 0 { // first sample flags
		head += 4
	}
	entry := 4 * int64(bits.OnesCount32(flags&0xF00))
	if flags&0x100 == 0 || entry == 0 {
		// No durations listed: every sample lasts the default.
		hi, lo := bits.Mul64(uint64(count), uint64(m.trafDur))
		if hi != 0 {
			lo = 1 << 62
		}
		m.trafSum = min(m.trafSum+min(lo, 1<<62), 1<<62)
		_, err := p.skip(n)
		return err
	}
	if _, err := p.skip(min(head, n)); err != nil {
		return err
	}
	return p.table(n-min(head, n), count, entry, func(e []byte) { m.trafSum = min(m.trafSum+uint64(be32(e)), 1<<62) })
}

// table hands each of count entries of entry bytes, the next of the n payload bytes left in
// a box, to add, reading them through the buffer (a table may list thousands of samples),
// then skips the rest of the box.
func (p *prober) table(n, count, entry int64, add func(e []byte)) error {
	count = min(count, n/entry)
	for count > 0 {
		k := min(count, bufSize/entry)
		b, err := p.peek(int(k * entry))
		if err != nil {
			return err
		}
		if int64(len(b)) < k*entry {
			break
		}
		for i := range k {
			add(b[i*entry:])
		}
		if _, err := p.skip(k * entry); err != nil {
			return err
		}
		n -= k * entry
		count -= k
	}
	_, err := p.skip(n)
	return err
}

// stts adds up the sample durations of a time-to-sample box of n payload bytes into the
// track being read: entries of a sample count and the duration of each, read through the
// buffer, since a variable-rate track lists many.
func (p *prober) stts(n int64, m *mp4Info) error {
	b, err := p.peek(int(min(n, 8)))
	if err != nil {
		return err
	}
	if len(b) < 8 {
		_, err := p.skip(n)
		return err
	}
	count := int64(be32(b[4:]))
	if _, err := p.skip(8); err != nil {
		return err
	}
	return p.table(n-8, count, 8, func(e []byte) {
		hi, lo := bits.Mul64(uint64(be32(e)), uint64(be32(e[4:])))
		if hi != 0 || lo > 1<<62 {
			lo = 1 << 62
		}
		m.sampled = min(m.sampled+lo, 1<<62)
	})
}

// editLength adds up the edits of an elst box b that present media (an edit with media time
// -1 is an empty one). An edit list too long for the buffer is ignored: it is a video habit,
// and an audio track has one edit, which trims the encoder's priming samples.
func editLength(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	v1 := b[0] == 1
	entry := 12
	if v1 {
		entry = 20
	}
	n := int(be32(b[4:]))
	if n == 0 || n > (len(b)-8)/entry {
		return 0, false
	}
	var sum uint64
	for i := range n {
		e := b[8+i*entry:]
		if v1 {
			if be64(e[8:]) != ^uint64(0) {
				sum += be64(e)
			}
		} else if be32(e[4:]) != 0xFFFFFFFF {
			sum += uint64(be32(e))
		}
	}
	return sum, sum > 0 && sum < 1<<62
}

// fullBoxTime reads the timescale and duration of an mvhd or mdhd box, whose version 1
// widens the times to 64 bits.
func fullBoxTime(b []byte) (scale uint32, duration uint64) {
	switch {
	case len(b) >= 32 && b[0] == 1:
		return be32(b[20:]), be64(b[24:])
	case len(b) >= 20 && b[0] == 0:
		return be32(b[12:]), uint64(be32(b[16:]))
	}
	return 0, 0
}

// fullBoxValue reads the one time field of an mehd or tfdt box, 64 bits wide in version 1.
func fullBoxValue(b []byte) (uint64, bool) {
	switch {
	case len(b) >= 12 && b[0] == 1:
		return be64(b[4:]), true
	case len(b) >= 8 && b[0] == 0:
		return uint64(be32(b[4:])), true
	}
	return 0, false
}
