package audioprobe

import (
	"math/bits"
	"time"
)

// isMP4Start says whether head opens an ISO base media (MP4, M4A) or QuickTime file: a box
// header with one of the types such files begin with.
func isMP4Start(head []byte) bool {
	switch string(head[4:8]) {
	case "ftyp", "moov", "mdat", "free", "skip", "wide", "pnot":
		size := be32(head)
		return size == 0 || size == 1 || size >= 8
	}
	return false
}

// mp4Info collects what the moov box says about the duration.
type mp4Info struct {
	movieScale    uint32 // mvhd
	movieDuration uint64
	fragments     uint64 // mvex/mehd, in the movie's timescale

	// The track being read, and the first audio track's result.
	handler    [4]byte
	trackScale uint32
	trackDur   uint64
	edited     uint64 // the track's edit list: its presented length, in the movie's timescale
	editOK     bool
	audioScale uint32
	audioDur   uint64
	audio      bool
}

// mp4 measures an MP4 or M4A file from its moov box: the first audio track's media duration
// over its timescale (mdhd, in samples of the audio), else the movie's (mvhd, often in
// milliseconds), else the fragment duration of a fragmented file (mehd). Writers put moov
// before or after the media data; boxes are read one after the other, and mdat and the like
// are read through and dropped, since the input cannot seek.
func (p *prober) mp4() (time.Duration, error) {
	var m mp4Info
	found := false
	for !found {
		typ, _, payload, ok, err := p.mp4Box(-1)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		if typ == "moov" {
			if err := p.mp4Boxes(payload, 1, &m); err != nil {
				return 0, err
			}
			found = true
			continue
		}
		if payload < 0 {
			break // runs to the end of the file; no moov can follow
		}
		if _, err := p.skip(payload); err != nil {
			return 0, err
		}
	}
	if !found {
		return 0, malformed(MP4, "no moov box")
	}
	var (
		d  time.Duration
		ok bool
	)
	switch {
	case m.audio:
		d, ok = samples(m.audioDur, uint64(m.audioScale))
	case known(m.movieDuration) && m.movieScale > 0:
		d, ok = samples(m.movieDuration, uint64(m.movieScale))
	case known(m.fragments) && m.movieScale > 0:
		d, ok = samples(m.fragments, uint64(m.movieScale))
	default:
		return 0, malformed(MP4, "no duration in moov")
	}
	if !ok {
		return 0, malformed(MP4, "duration out of range")
	}
	return d, nil
}

// known says whether a duration field holds a duration: 0 and all ones both mean unknown.
func known(d uint64) bool {
	return d != 0 && d != 0xFFFFFFFF && d != ^uint64(0)
}

// mp4Box reads a box header and returns the box's type and the length of its payload, -1
// when it runs to the end of its parent. limit is the bytes left in the parent (-1: the
// file). hdr is the length of the header, which the
// reader is past on return; ok is false at the end of the parent.
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

// mp4Type returns the box type without allocating for the types this file compares.
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
	case "mvhd":
		return "mvhd"
	case "mdhd":
		return "mdhd"
	case "hdlr":
		return "hdlr"
	case "mehd":
		return "mehd"
	case "edts":
		return "edts"
	case "elst":
		return "elst"
	}
	return "other"
}

// mp4Boxes reads the children of a container box of n payload bytes, descending only into
// the boxes on the way to a duration.
func (p *prober) mp4Boxes(n int64, depth int, m *mp4Info) error {
	if n < 0 {
		n = 1 << 62 // a moov running to the end of the file
	}
	for {
		typ, hdr, payload, ok, err := p.mp4Box(n)
		if err != nil || !ok {
			return err
		}
		n -= hdr + payload
		var b []byte
		switch typ {
		case "trak", "mdia", "mvex", "edts":
			if depth > 3 {
				break
			}
			if typ == "trak" {
				m.handler, m.trackScale, m.trackDur, m.edited, m.editOK = [4]byte{}, 0, 0, 0, false
			}
			if err := p.mp4Boxes(payload, depth+1, m); err != nil {
				return err
			}
			if typ == "trak" && !m.audio && string(m.handler[:]) == "soun" && m.trackScale > 0 && known(m.trackDur) {
				m.audio, m.audioScale, m.audioDur = true, m.trackScale, m.trackDur
				m.trimmed(m.movieScale)
			}
			continue
		case "mvhd", "mdhd", "hdlr", "mehd":
			if b, err = p.peek(int(min(payload, 32))); err != nil {
				return err
			}
		case "elst":
			if b, err = p.peek(int(min(payload, bufSize))); err != nil {
				return err
			}
			m.edited, m.editOK = editLength(b)
		}
		switch typ {
		case "mvhd":
			m.movieScale, m.movieDuration = fullBoxTime(b)
		case "mdhd":
			m.trackScale, m.trackDur = fullBoxTime(b)
		case "hdlr":
			if len(b) >= 12 {
				copy(m.handler[:], b[8:12])
			}
		case "mehd":
			switch {
			case len(b) >= 12 && b[0] == 1:
				m.fragments = be64(b[4:])
			case len(b) >= 8:
				m.fragments = uint64(be32(b[4:]))
			}
		}
		if _, err := p.skip(payload); err != nil {
			return err
		}
	}
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

// trimmed replaces the audio track's duration with its edit list's when that is shorter:
// AAC encoders prime the decoder with 1,024 or 2,112 samples and pad the last frame, and
// the edit list cuts both, so it gives the length a player plays.
func (m *mp4Info) trimmed(movieScale uint32) {
	if !m.editOK || movieScale == 0 {
		return
	}
	// Compare edited/movieScale with audioDur/audioScale without dividing.
	hi, lo := bits.Mul64(m.edited, uint64(m.audioScale))
	hi2, lo2 := bits.Mul64(m.audioDur, uint64(movieScale))
	if hi < hi2 || (hi == hi2 && lo < lo2) {
		m.audioDur, m.audioScale = m.edited, movieScale
	}
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
