package audioprobe

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// oggCRC is the table of the Ogg page checksum: CRC-32, polynomial 0x04C11DB7, not
// reflected, initial value 0 (not the IEEE variant hash/crc32 computes).
var oggCRC = crcTable(0x04C11DB7, 32)

// crcTable is the byte-at-a-time table of a CRC of width bits (8 to 32), most significant
// bit first, with polynomial poly: the CRCs of Ogg and FLAC, which hash/crc32 and its
// reflected tables do not compute.
func crcTable(poly uint32, width uint) (t [256]uint32) {
	top := uint32(1) << (width - 1)
	for i := range t {
		r := uint32(i) << (width - 8)
		for range 8 {
			if r&top != 0 {
				r = r<<1 ^ poly
			} else {
				r <<= 1
			}
		}
		t[i] = r & (top<<1 - 1)
	}
	return t
}

func oggUpdate(crc uint32, b []byte) uint32 {
	for _, c := range b {
		crc = crc<<8 ^ oggCRC[byte(crc>>24)^c]
	}
	return crc
}

// oggLink is the audio stream of one link of an Ogg file (a file may chain several, one
// after the other, each with its own headers).
type oggLink struct {
	serial  uint32
	codec   Format
	rate    uint64
	preskip uint64 // Opus: samples the decoder drops at the start
	granule uint64 // the largest granule position of its pages
	data    bool   // a page after its headers' first was seen
	packets uint64 // packets begun, headers included
	played  uint64 // Opus: the samples its packets' TOC bytes say they hold
}

// opusHeaderPackets is how many packets open an Opus stream without audio: OpusHead, OpusTags.
const opusHeaderPackets = 2

func (l oggLink) duration() (time.Duration, bool) {
	g := l.granule
	if l.codec == Opus {
		// The decoder plays every packet; the granule only trims the last one, and a
		// forged granule would trim the stream to nothing.
		g = max(g, l.played)
		g -= min(g, l.preskip)
	}
	return samples(g, l.rate)
}

// ogg measures an Ogg file from the granule positions of its audio stream's pages, read to
// the end of the file: the number of samples decoded up to the end of a page (at 48 kHz for
// Opus, less the pre-skip its header declares; at the stream's own rate otherwise). The
// largest counts, not the last page's nor the one marked end of stream, since pages after
// either still play. For Opus the packets' own durations are added up too, and the longer
// reading counts. Pages whose checksum fails are ignored, other logical streams (Skeleton,
// video) too; of several audio streams the longest counts, and the links of a chained file
// are added up.
func (p *prober) ogg() (time.Duration, Format, error) {
	var (
		links  [4]oggLink // the audio streams of the chain's current link
		nlinks int
		total  time.Duration
		format Format
		hdr    [27 + 255]byte
		heads  [255]packetHead
	)
	// finish ends the chain's current link: its longest audio stream counts, whichever a
	// decoder picks.
	finish := func() bool {
		var longest time.Duration
		for _, l := range links[:nlinks] {
			d, ok := l.duration()
			if !ok {
				return false
			}
			longest = max(longest, d)
		}
		total += longest
		nlinks = 0
		return true
	}
	find := func(serial uint32) int {
		for i := range links[:nlinks] {
			if links[i].serial == serial {
				return i
			}
		}
		return -1
	}
	for {
		h, err := p.peek(27)
		if err != nil {
			return 0, format, err
		}
		if len(h) < 27 {
			break
		}
		if string(h[:4]) != "OggS" || h[4] != 0 {
			if err := p.resyncOgg(); err != nil {
				return 0, format, err
			}
			continue
		}
		nseg := int(h[26])
		h, err = p.peek(27 + nseg)
		if err != nil {
			return 0, format, err
		}
		if len(h) < 27+nseg {
			break
		}
		n := copy(hdr[:], h)
		flags, granule, serial, want := h[5], le64(h[6:]), le32(h[14:]), le32(h[22:])
		body := 0
		for _, s := range hdr[27:n] {
			body += int(s)
		}
		clear(hdr[22:26]) // the checksum is computed with its own field zeroed
		crc := oggUpdate(0, hdr[:n])
		if _, err := p.skip(int64(n)); err != nil {
			return 0, format, err
		}
		// The first packet of a stream (its identification header) is short and opens the
		// body of its first page; read it from the buffer before the checksum walk drops it.
		var ident oggLink
		if flags&0x02 != 0 {
			b, err := p.peek(min(body, 64))
			if err != nil {
				return 0, format, err
			}
			ident = oggIdent(b)
		}
		// The first two bytes of each packet that begins on this page: an Opus packet says
		// how long it plays in them (its TOC byte and, for some, a frame count).
		starts := packetStarts(hdr[27:n], flags&0x01 != 0, &heads)
		for pos, left := 0, body; left > 0; {
			b, err := p.peek(min(left, bufSize))
			if err != nil {
				return 0, format, err
			}
			if len(b) == 0 {
				break
			}
			for i := range starts {
				for k := range 2 {
					if at := int(heads[i].at) + k - pos; at >= 0 && at < len(b) {
						heads[i].toc[k] = b[at]
					}
				}
			}
			crc = oggUpdate(crc, b)
			if _, err := p.skip(int64(len(b))); err != nil {
				return 0, format, err
			}
			pos += len(b)
			left -= len(b)
		}
		if crc != want {
			continue // corrupt: its granule cannot be trusted
		}
		if flags&0x02 != 0 {
			// A new stream. Streams multiplexed together all begin before any data page,
			// so a beginning after a stream's data is the next link of a chain; one before
			// it is another stream of this link.
			if slices.ContainsFunc(links[:nlinks], func(l oggLink) bool { return l.data }) && !finish() {
				return 0, format, malformed(format, "granule position out of range")
			}
			if ident.codec != "" && nlinks < len(links) && find(serial) < 0 {
				if format == "" {
					format = ident.codec
				}
				links[nlinks] = ident
				links[nlinks].serial = serial
				nlinks++
			}
		}
		i := find(serial)
		if i < 0 {
			continue // not an audio stream
		}
		l := &links[i]
		if flags&0x02 == 0 {
			l.data = true
			if granule != ^uint64(0) {
				l.granule = max(l.granule, granule)
			}
		}
		for _, h := range heads[:starts] {
			if l.packets >= opusHeaderPackets && l.codec == Opus {
				l.played += opusPacketSamples(h.toc[:h.n])
			}
			l.packets++
		}
	}
	if format == "" {
		return 0, "", fmt.Errorf("%w: ogg: no audio stream", ErrMalformed)
	}
	if !finish() {
		return 0, format, malformed(format, "granule position out of range")
	}
	return total, format, nil
}

// packetHead is where a packet begins in its page's body, and its first n (≤ 2) bytes.
type packetHead struct {
	at  int32
	n   int
	toc [2]byte
}

// packetStarts fills heads with the packets that begin on a page from its lacing values
// (continued: its first bytes end a packet of the page before) and returns how many.
func packetStarts(lacing []byte, continued bool, heads *[255]packetHead) int {
	n, at, begun := 0, 0, !continued
	for i, v := range lacing {
		if begun {
			heads[n] = packetHead{at: int32(at)}
			n++
			begun = false
		}
		// The bytes of the packet on this page, up to two, are its head.
		if h := &heads[max(n-1, 0)]; n > 0 && h.n < 2 {
			h.n = min(2, h.n+int(v))
		}
		at += int(v)
		if v < 255 && i < len(lacing)-1 {
			begun = true
		}
	}
	return n
}

// oggIdent recognises the identification header of an audio codec in Ogg; a stream of any
// other kind comes back with no codec.
func oggIdent(b []byte) oggLink {
	switch {
	case len(b) >= 19 && string(b[:8]) == "OpusHead":
		// Opus granules count 48 kHz samples whatever the input rate was.
		return oggLink{codec: Opus, rate: 48000, preskip: uint64(le16(b[10:]))}
	case len(b) >= 16 && string(b[:7]) == "\x01vorbis":
		return oggLink{codec: Vorbis, rate: uint64(le32(b[12:]))}
	case len(b) >= 17+18 && string(b[:5]) == "\x7fFLAC" && string(b[9:13]) == "fLaC":
		return oggLink{codec: OggFLAC, rate: uint64(be24(b[17+10:]) >> 4)}
	case len(b) >= 40 && string(b[:8]) == "Speex   ":
		return oggLink{codec: Speex, rate: uint64(le32(b[36:]))}
	}
	return oggLink{}
}

// resyncOgg skips to the next capture pattern after the reader's position.
func (p *prober) resyncOgg() error {
	if _, err := p.skip(1); err != nil {
		return err
	}
	for {
		b, err := p.peek(min(bufSize, max(p.br.Buffered(), 4)))
		if err != nil {
			return err
		}
		if i := bytes.Index(b, []byte("OggS")); i >= 0 {
			_, err := p.skip(int64(i))
			return err
		}
		if len(b) < 4 {
			_, err := p.skip(int64(len(b)))
			return err
		}
		if _, err := p.skip(int64(len(b) - 3)); err != nil { // a pattern may straddle reads
			return err
		}
	}
}
