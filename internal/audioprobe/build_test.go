package audioprobe

import (
	"bytes"
	"encoding/binary"
)

// Builders of small, valid files of each container, written from the specifications rather
// than from the code under test.

var (
	le = binary.LittleEndian
	be = binary.BigEndian
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func u16le(v uint16) []byte { return le.AppendUint16(nil, v) }
func u32le(v uint32) []byte { return le.AppendUint32(nil, v) }
func u64le(v uint64) []byte { return le.AppendUint64(nil, v) }
func u32be(v uint32) []byte { return be.AppendUint32(nil, v) }
func u64be(v uint64) []byte { return be.AppendUint64(nil, v) }

// riffChunk is a RIFF chunk, padded to an even length.
func riffChunk(id string, body []byte) []byte {
	c := cat([]byte(id), u32le(uint32(len(body))), body)
	if len(body)%2 == 1 {
		c = append(c, 0)
	}
	return c
}

// wavFile wraps chunks in a RIFF/WAVE header.
func wavFile(chunks ...[]byte) []byte {
	body := cat(chunks...)
	return cat([]byte("RIFF"), u32le(uint32(4+len(body))), []byte("WAVE"), body)
}

func fmtPCM(tag, channels uint16, rate uint32, bits uint16) []byte {
	align := channels * bits / 8
	return riffChunk("fmt ", cat(u16le(tag), u16le(channels), u32le(rate), u32le(rate*uint32(align)), u16le(align), u16le(bits)))
}

// fmtExtensible is a WAVE_FORMAT_EXTENSIBLE fmt chunk whose sub-format is tag.
func fmtExtensible(tag, channels uint16, rate uint32, bits uint16) []byte {
	align := channels * bits / 8
	guid := cat(u16le(tag), []byte{0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71})
	return riffChunk("fmt ", cat(u16le(0xFFFE), u16le(channels), u32le(rate), u32le(rate*uint32(align)), u16le(align), u16le(bits),
		u16le(22), u16le(bits), u32le(3), guid))
}

// mpegFrames is n MPEG audio frames of size bytes with header h, silent.
func mpegFrames(h [4]byte, size, n int) []byte {
	f := make([]byte, size)
	copy(f, h[:])
	return bytes.Repeat(f, n)
}

// id3v2 is an ID3v2.4 tag of n bytes of content (plus header), with 0xFF bytes in it that
// look like frame syncs.
func id3v2(n int) []byte {
	body := bytes.Repeat([]byte{0xFF, 0xFB, 0x90, 0x00, 'x'}, n/5+1)[:n]
	return cat([]byte("ID3\x04\x00\x00"), []byte{byte(n >> 21 & 0x7F), byte(n >> 14 & 0x7F), byte(n >> 7 & 0x7F), byte(n & 0x7F)}, body)
}

func id3v1() []byte {
	t := make([]byte, 128)
	copy(t, "TAGtitle")
	return t
}

// apeTag is an APEv2 tag with a header, whose item holds bytes that look like frames.
func apeTag() []byte {
	item := cat(u32le(12), u32le(2), []byte("Cover\x00"), mpegFrames([4]byte{0xFF, 0xFB, 0x90, 0x00}, 6, 2))
	size := uint32(len(item) + 32)
	hdr := func(flags uint32) []byte {
		return cat([]byte("APETAGEX"), u32le(2000), u32le(size), u32le(1), u32le(flags), make([]byte, 8))
	}
	return cat(hdr(0xA0000000), item, hdr(0x80000000))
}

// xingFrame is a silent MPEG-1 layer III stereo frame (128 kbit/s, 44.1 kHz) holding a
// Xing or Info header that counts frames, and a LAME tag with the encoder's delay and padding
// when lame is set.
func xingFrame(id string, frames uint32, lame bool, delay, padding int) []byte {
	f := mpegFrames([4]byte{0xFF, 0xFB, 0x90, 0x00}, 417, 1)
	x := cat([]byte(id), u32be(1|4), u32be(frames), make([]byte, 100))
	if lame {
		tag := make([]byte, 36)
		copy(tag, "LAME3.100")
		tag[21], tag[22], tag[23] = byte(delay>>4), byte(delay<<4|padding>>8), byte(padding)
		x = append(x, tag...)
	}
	copy(f[4+32:], x)
	return f
}

// vbriFrame is a silent MPEG-1 layer III frame holding a VBRI header.
func vbriFrame(frames uint32) []byte {
	f := mpegFrames([4]byte{0xFF, 0xFB, 0x90, 0x00}, 417, 1)
	copy(f[36:], cat([]byte("VBRI"), u16le(1), u16le(0), u16le(75), u32be(100000), u32be(frames)))
	return f
}

// streamInfo is a FLAC STREAMINFO block body (34 bytes).
func streamInfoBody(rate uint32, channels, bits int, total uint64) []byte {
	b := make([]byte, 34)
	be.PutUint16(b[0:], 4096)
	be.PutUint16(b[2:], 4096)
	x := uint64(rate)<<44 | uint64(channels-1)<<41 | uint64(bits-1)<<36 | total&(1<<36-1)
	be.PutUint64(b[10:], x)
	return b
}

func flacFile(rate uint32, total uint64, extra ...[]byte) []byte {
	blocks := cat([]byte{0x00, 0, 0, 34}, streamInfoBody(rate, 2, 16, total))
	// A PADDING block, last.
	blocks = cat(blocks, []byte{0x81, 0, 0, 16}, make([]byte, 16))
	return cat([]byte("fLaC"), blocks, []byte{0xFF, 0xF8, 0x69, 0x08}, make([]byte, 200), cat(extra...))
}

// oggChecksum computes the Ogg CRC bit by bit, independently of the table in ogg.go.
func oggChecksum(b []byte) uint32 {
	var crc uint32
	for _, c := range b {
		crc ^= uint32(c) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04C11DB7
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// oggPage is one Ogg page holding whole packets, with a correct checksum.
func oggPage(flags byte, granule uint64, serial, seq uint32, packets ...[]byte) []byte {
	var lacing, body []byte
	for _, p := range packets {
		n := len(p)
		for ; n >= 255; n -= 255 {
			lacing = append(lacing, 255)
		}
		lacing = append(lacing, byte(n))
		body = append(body, p...)
	}
	page := cat([]byte("OggS"), []byte{0, flags}, u64le(granule), u32le(serial), u32le(seq), u32le(0), []byte{byte(len(lacing))}, lacing, body)
	le.PutUint32(page[22:], oggChecksum(page))
	return page
}

func opusHead(preskip uint16) []byte {
	return cat([]byte("OpusHead"), []byte{1, 2}, u16le(preskip), u32le(44100), u16le(0), []byte{0})
}

func vorbisIdent(rate uint32) []byte {
	return cat([]byte("\x01vorbis"), u32le(0), []byte{2}, u32le(rate), u32le(0), u32le(128000), u32le(0), []byte{0xB8, 1})
}

// oggStream is one logical stream: its header page, a tags page and data pages whose
// granules are given, the last marked end of stream.
func oggStream(serial uint32, ident []byte, granules ...uint64) []byte {
	out := cat(oggPage(0x02, 0, serial, 0, ident), oggPage(0, 0, serial, 1, []byte("OpusTags-or-comments")))
	for i, g := range granules {
		flags := byte(0)
		if i == len(granules)-1 {
			flags = 0x04
		}
		out = append(out, oggPage(flags, g, serial, uint32(i+2), bytes.Repeat([]byte{0x55}, 300))...)
	}
	return out
}

// box is an ISO BMFF box.
func box(typ string, payload ...[]byte) []byte {
	body := cat(payload...)
	return cat(u32be(uint32(8+len(body))), []byte(typ), body)
}

// largeBox is a box with a 64-bit size.
func largeBox(typ string, payload []byte) []byte {
	return cat(u32be(1), []byte(typ), u64be(uint64(16+len(payload))), payload)
}

// timeBox is an mvhd or mdhd box, version 0 or 1.
func timeBox(typ string, version byte, scale uint32, duration uint64) []byte {
	if version == 1 {
		return box(typ, []byte{1, 0, 0, 0}, u64be(0), u64be(0), u32be(scale), u64be(duration), make([]byte, 80))
	}
	return box(typ, []byte{0, 0, 0, 0}, u32be(0), u32be(0), u32be(scale), u32be(uint32(duration)), make([]byte, 80))
}

func hdlr(handler string) []byte {
	return box("hdlr", []byte{0, 0, 0, 0}, u32be(0), []byte(handler), make([]byte, 12), []byte("handler\x00"))
}

func trak(handler string, scale uint32, duration uint64, extra ...[]byte) []byte {
	return box("trak", box("tkhd", make([]byte, 84)), cat(extra...),
		box("mdia", timeBox("mdhd", 0, scale, duration), hdlr(handler), box("minf", box("stbl", make([]byte, 500)))))
}

// elst is an edit list box (version 0) of (segment duration, media time) pairs.
func elst(edits ...[2]int32) []byte {
	body := cat([]byte{0, 0, 0, 0}, u32be(uint32(len(edits))))
	for _, e := range edits {
		body = cat(body, u32be(uint32(e[0])), u32be(uint32(e[1])), u32be(1<<16))
	}
	return box("edts", box("elst", body))
}

var ftypM4A = box("ftyp", []byte("M4A "), u32be(0), []byte("M4A mp42isom"))

// flacFrame is a FLAC frame header (fixed or variable block size, block size code code and,
// for codes 6 and 7, the size itself), followed by silent data free of sync codes.
func flacFrame(variable bool, num uint64, code byte, size int) []byte {
	h := []byte{0xFF, 0xF8, code << 4, 0x00}
	if variable {
		h[1] = 0xF9
	}
	// The frame or sample number, coded like UTF-8.
	switch {
	case num < 0x80:
		h = append(h, byte(num))
	case num < 0x800:
		h = append(h, 0xC0|byte(num>>6), 0x80|byte(num&0x3F))
	default:
		h = append(h, 0xE0|byte(num>>12), 0x80|byte(num>>6&0x3F), 0x80|byte(num&0x3F))
	}
	switch code {
	case 6:
		h = append(h, byte(size-1))
	case 7:
		h = be.AppendUint16(h, uint16(size-1))
	}
	return cat(h, []byte{flacCRC8(h)}, bytes.Repeat([]byte{0x12, 0xFF, 0xF8, 0x34}, 30))
}

// fragmentedM4A is a fragmented MP4 whose audio track (ID 2, timescale 48000) has three
// fragments: the first lists the durations of its listed samples (1,024 each, more than the
// buffer holds when listed is large), the second has 10 samples of the tfhd default, the
// third 10 of the trex default; a video track's fragment (ID 1) comes in between.
func fragmentedM4A(tfdt bool, listed int) []byte {
	trakWithID := func(id uint32, handler string) []byte {
		tkhd := box("tkhd", []byte{0, 0, 0, 7}, u32be(0), u32be(0), u32be(id), make([]byte, 68))
		return box("trak", tkhd, box("mdia", timeBox("mdhd", 0, 48000, 0), hdlr(handler)))
	}
	moov := box("moov", timeBox("mvhd", 0, 1000, 0), trakWithID(1, "vide"), trakWithID(2, "soun"),
		box("mvex", box("trex", []byte{0, 0, 0, 0}, u32be(2), u32be(1), u32be(1024), u32be(0), u32be(0))))
	traf := func(id uint32, n int, base uint64, tfhd []byte, trun []byte) []byte {
		var t []byte
		if tfdt {
			t = box("tfdt", []byte{1, 0, 0, 0}, u64be(base))
		}
		return box("moof", box("mfhd", u32be(0), u32be(uint32(n))), box("traf", tfhd, t, trun))
	}
	run := cat([]byte{0, 0, 0x03, 0x01}, u32be(uint32(listed)), u32be(0)) // data offset, durations and sizes
	for range listed {
		run = cat(run, u32be(1024), u32be(200))
	}
	second := uint64(listed) * 1024
	return cat(box("ftyp", []byte("iso5"), u32be(0)), moov,
		traf(2, 1, 0, box("tfhd", []byte{0, 0x02, 0, 0}, u32be(2)), box("trun", run)), box("mdat", make([]byte, 2000)),
		traf(1, 2, 0, box("tfhd", []byte{0, 0, 0, 0x08}, u32be(1), u32be(99999)), box("trun", []byte{0, 0, 0, 0}, u32be(10))),
		traf(2, 3, second, box("tfhd", []byte{0, 0, 0, 0x08}, u32be(2), u32be(1024)), box("trun", []byte{0, 0, 0x02, 0}, u32be(10), make([]byte, 40))), box("mdat", make([]byte, 2000)),
		traf(2, 4, second+10240, box("tfhd", []byte{0, 0, 0, 0}, u32be(2)), box("trun", []byte{0, 0, 0, 0}, u32be(10))), box("mdat", make([]byte, 2000)))
}

// adtsFrames is n silent AAC frames in ADTS (44.1 kHz, stereo, no CRC) of size bytes, each
// holding blocks raw data blocks of 1,024 samples.
func adtsFrames(size, blocks, n int) []byte {
	f := make([]byte, size)
	copy(f, []byte{0xFF, 0xF1, 0x50, 0x80 | byte(size>>11), byte(size >> 3), byte(size&7)<<5 | 0x1F, 0xFC | byte(blocks-1)})
	return bytes.Repeat(f, n)
}

// ebml is a Matroska element with a known size (an 8-byte size field, as any writer may use).
func ebml(id uint32, payload ...[]byte) []byte {
	body := cat(payload...)
	idb := be.AppendUint32(nil, id)
	for len(idb) > 1 && idb[0] == 0 {
		idb = idb[1:]
	}
	return cat(idb, []byte{0x01}, be.AppendUint64(nil, uint64(len(body)))[1:], body)
}

// ebmlOpen is the head of a Matroska master element of unknown size, as live writers emit.
func ebmlOpen(id uint32) []byte {
	return cat(be.AppendUint32(nil, id), []byte{0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})
}

func ebmlUintBody(v uint64) []byte { return be.AppendUint64(nil, v) }

// simpleBlock is a SimpleBlock of track (< 127) at rel ticks into its cluster, whose frame
// opens with toc.
func simpleBlock(track byte, rel int16, toc byte) []byte {
	return ebml(mkvSimpleBlock, []byte{0x80 | track}, be.AppendUint16(nil, uint16(rel)), []byte{0x80, toc}, make([]byte, 30))
}

// webmRecording is a WebM as a browser's MediaRecorder writes it: no duration, a segment and
// clusters of unknown size, a video track before the Opus track (number 2), whose blocks of
// 20 ms (TOC 0xFC: CELT, 20 ms, one frame) are spread over clusters of a second.
func webmRecording(blocks int) []byte {
	out := cat(ebml(ebmlHeader, ebml(0x4282, []byte("webm"))), ebmlOpen(mkvSegment),
		ebml(mkvInfo, ebml(mkvScale, ebmlUintBody(1000000)), ebml(0x4D80, []byte("Chrome"))),
		ebml(mkvTracks,
			ebml(mkvTrackEntry, ebml(mkvTrackNumber, []byte{1}), ebml(mkvTrackType, []byte{1}), ebml(mkvCodecID, []byte("V_VP8"))),
			ebml(mkvTrackEntry, ebml(mkvTrackNumber, []byte{2}), ebml(mkvCodecID, []byte(mkvTrackOpus)), ebml(mkvTrackType, []byte{2}),
				ebml(0xE1, ebml(0xB5, be.AppendUint64(nil, 0x40E7700000000000))))))
	for i := range blocks {
		if i%50 == 0 {
			out = cat(out, ebmlOpen(mkvCluster), ebml(mkvTimestamp, ebmlUintBody(uint64(i*20))))
			out = cat(out, simpleBlock(1, 0, 0x00)) // a video frame
		}
		out = cat(out, simpleBlock(2, int16(i%50*20), 0xFC))
	}
	return out
}
