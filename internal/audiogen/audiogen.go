// Package audiogen writes audio files whose length is known because they are made sample by
// sample (or frame by frame, each frame holding a fixed number of samples), in each container
// the gateway measures, with headers that may understate that length the way a client
// forging its upload would. The length a file plays is computed here from what was written,
// never by measuring the file, so that tests can hold internal/audioprobe (and the mock
// upstream, which measures with it) to it. Only tests import it.
package audiogen

import (
	"bytes"
	"encoding/binary"
	"math"
	"time"
)

// File is a generated audio file.
type File struct {
	Name string
	Data []byte
	// Length is how long a decoder plays Data: the samples written over their rate.
	Length time.Duration
	// Refusable says that the file is one a biller may refuse rather than bill Length:
	// its headers contradict its contents in a way no encoder writes.
	Refusable bool
}

var (
	le = binary.LittleEndian
	be = binary.BigEndian
)

// noise is a deterministic pseudo-random sequence (xorshift32), so that a byte out of
// place shows and no run of samples is silent.
type noise uint32

func (n *noise) next() uint32 {
	x := uint32(*n)
	if x == 0 {
		x = 2463534242
	}
	x ^= x << 13
	x ^= x >> 17
	x ^= x << 5
	*n = noise(x)
	return x
}

// length is n samples at rate as a duration, rounded to the nanosecond.
func length(n, rate uint64) time.Duration {
	return time.Duration(math.Round(float64(n) * float64(time.Second) / float64(rate)))
}

// Forged returns files that play for about seconds (at least 2) whose headers say they play
// for 1 s, one or more for each container: the uploads that were billed 1 s.
func Forged(seconds int) []File {
	s := max(seconds, 2)
	const wavRate = 8000
	wavPCM := PCM(wavRate*s, 1)
	mp3Frames := s * 44100 / 1152
	mp3 := MP3(mp3Frames, 1)
	at48k := (s - 1) * 48000 / 1152 // MPEG-1 layer III at 128 kbit/s and 48 kHz: 384 bytes a frame
	return []File{
		{Name: "wav data chunk says 1 s", Data: WAV(wavRate, wavRate, [][]int16{wavPCM}), Length: length(uint64(len(wavPCM)), wavRate), Refusable: true},
		{Name: "wav data chunks of 1 s and the rest", Data: WAV(wavRate, 0, [][]int16{wavPCM[:wavRate], wavPCM[wavRate:]}), Length: length(uint64(len(wavPCM)), wavRate)},
		{Name: "wav fmt claims 4e9 Hz", Data: WAV(4_000_000_000, 0, [][]int16{wavPCM}), Length: length(uint64(len(wavPCM)), wavRate), Refusable: true},
		adpcmWAV(s*8000/505, 1),
		{Name: "wav of 1 s then an mp3", Data: append(WAV(wavRate, 0, [][]int16{wavPCM[:wavRate]}), mp3.Data...), Length: time.Second + mp3.Length, Refusable: true},
		{Name: "mp3 xing counts 1 frame", Data: mp3.Data, Length: mp3.Length},
		{Name: "mp3 frames of the reserved emphasis", Data: append(MP3(0, 1).Data, mpegFrames([4]byte{0xFF, 0xFB, 0x90, 0x02}, 417, mp3Frames)...), Length: mp3.Length},
		{Name: "mp3 of 1 s then free-format frames", Data: append(MP3(39, 39).Data, mpegFrames([4]byte{0xFF, 0xFB, 0x00, 0x00}, 417, mp3Frames)...),
			Length: MP3(39, 39).Length + mp3.Length, Refusable: true},
		{Name: "mp3 of 1 s then frames at 48 kHz", Data: append(MP3(39, 39).Data, mpegFrames([4]byte{0xFF, 0xFB, 0x94, 0x00}, 384, at48k)...),
			Length: MP3(39, 39).Length + length(uint64(at48k)*1152, 48000)},
		FLAC(8000, s*8000, 8000, 16, false),
		FLAC(8000, s*8000, 8000, 4096, true),
		OggOpus(s*50, 48000, false),
		OggOpus(s*50, 48000, true),
		WebMOpus(s*50, 1000, false),
		WebMOpus(s*50, 1000, true),
		MatroskaPCM(s * 8000),
		M4A(s*48000/1024, 48000, 48000, false),
		M4A(s*48000/1024, 48000, 48000, true),
		FragmentedM4A(s, 48000),
	}
}

// PCM is n 16-bit samples of noise, seeded by seed.
func PCM(n int, seed uint32) []int16 {
	g := noise(seed)
	out := make([]int16, n)
	for i := range out {
		out[i] = int16(g.next())
	}
	return out
}

// WAV is a 16-bit mono PCM WAV at rate (the fmt chunk's claim) holding chunks, each in a
// data chunk of its own. declared, when not 0, is the sample count the first data chunk's
// size claims, whatever it holds.
func WAV(rate uint32, declared int, chunks [][]int16) []byte {
	var body bytes.Buffer
	body.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), rate, rate * 2, uint16(2), uint16(16)} {
		_ = binary.Write(&body, le, v)
	}
	for i, c := range chunks {
		size := uint32(2 * len(c))
		if i == 0 && declared != 0 {
			size = uint32(2 * declared)
		}
		body.WriteString("data")
		_ = binary.Write(&body, le, size)
		_ = binary.Write(&body, le, c)
	}
	return append(append([]byte("RIFF"), le.AppendUint32(nil, uint32(body.Len()))...), body.Bytes()...)
}

// adpcmWAV is an 8 kHz mono IMA ADPCM WAV of blocks blocks of 256 bytes holding 505
// samples each (4,055 bytes a second), whose fact chunk claims claim seconds.
func adpcmWAV(blocks, claim int) File {
	const rate, align, perBlock = 8000, 256, 505
	g := noise(13)
	data := make([]byte, blocks*align)
	for i := range data {
		data[i] = byte(g.next())
	}
	fmtBody := le.AppendUint16(nil, 0x11) // IMA ADPCM
	fmtBody = le.AppendUint16(fmtBody, 1)
	fmtBody = le.AppendUint32(fmtBody, rate)
	fmtBody = le.AppendUint32(fmtBody, 4055)
	fmtBody = le.AppendUint16(fmtBody, align)
	fmtBody = le.AppendUint16(fmtBody, 4)
	fmtBody = le.AppendUint16(fmtBody, 2)
	fmtBody = le.AppendUint16(fmtBody, perBlock)
	var body []byte
	body = append(body, "WAVE"...)
	for _, c := range []struct {
		id   string
		body []byte
	}{{"fmt ", fmtBody}, {"fact", le.AppendUint32(nil, uint32(claim*rate))}, {"data", data}} {
		body = append(append(append(body, c.id...), le.AppendUint32(nil, uint32(len(c.body)))...), c.body...)
	}
	return File{Name: "wav adpcm whose fact chunk says 1 s", Data: append(append([]byte("RIFF"), le.AppendUint32(nil, uint32(len(body)))...), body...),
		Length: length(uint64(blocks)*perBlock, rate)}
}

// MP3 is frames MPEG-1 layer III frames (128 kbit/s, 44.1 kHz, stereo: 417 bytes and 1,152
// samples each) of noise after a Xing frame that counts xingFrames of them (none when
// negative). The Xing frame is silence: a decoder plays the frames after it.
func MP3(frames, xingFrames int) File {
	const size = 417
	var out []byte
	if xingFrames >= 0 {
		f := make([]byte, size)
		copy(f, []byte{0xFF, 0xFB, 0x90, 0x00})
		copy(f[4+32:], append(append([]byte("Xing"), be.AppendUint32(nil, 1)...), be.AppendUint32(nil, uint32(xingFrames))...))
		out = append(out, f...)
	}
	out = append(out, mpegFrames([4]byte{0xFF, 0xFB, 0x90, 0x00}, size, frames)...)
	return File{Name: "mp3", Data: out, Length: length(uint64(frames)*1152, 44100)}
}

// mpegFrames is n MPEG audio frames of size bytes with header h, their main data noise with
// no sync byte in it.
func mpegFrames(h [4]byte, size, n int) []byte {
	g := noise(7)
	out := make([]byte, 0, size*n)
	for range n {
		out = append(out, h[:]...)
		for range size - 4 {
			out = append(out, byte(g.next()&0x7F))
		}
	}
	return out
}

// FLAC is a mono 16-bit FLAC at rate of n samples of noise, in frames of 4,096 samples
// (verbatim subframes) and a shorter last one, whose STREAMINFO claims declared samples
// (0: unknown) and a minimum block size of minBlock. The frames are numbered 0, 1, 2...
// unless unnumbered, when all say 0: a decoder plays each frame whose checksum holds.
func FLAC(rate, n, declared, minBlock int, unnumbered bool) File {
	info := make([]byte, 34)
	be.PutUint16(info[0:], uint16(minBlock))
	be.PutUint16(info[2:], 4096)
	be.PutUint64(info[10:], uint64(rate)<<44|uint64(0)<<41|uint64(15)<<36|uint64(declared)&(1<<36-1))
	out := append([]byte("fLaC\x80\x00\x00\x22"), info...) // the last metadata block, STREAMINFO
	samples := PCM(n, 3)
	for frame := 0; frame*4096 < n; frame++ {
		block := samples[frame*4096 : min(n, frame*4096+4096)]
		h := []byte{0xFF, 0xF8, 0xC0, 0x08} // 4,096 samples at STREAMINFO's rate; mono, 16 bits
		if len(block) != 4096 {
			h[2] = 0x70 // a 16-bit block size follows the number
		}
		if unnumbered {
			h = append(h, 0)
		} else {
			h = appendUTF8Number(h, uint64(frame))
		}
		if len(block) != 4096 {
			h = be.AppendUint16(h, uint16(len(block)-1))
		}
		h = append(h, crc8(h))
		h = append(h, 0x02) // a verbatim subframe
		for _, s := range block {
			h = be.AppendUint16(h, uint16(s))
		}
		out = append(out, be.AppendUint16(h, crc16(h))...)
	}
	name := "flac streaminfo says 1 s, block size 16"
	if unnumbered {
		name = "flac streaminfo says 1 s, frames all numbered 0"
	}
	return File{Name: name, Data: out, Length: length(uint64(n), uint64(rate))}
}

// appendUTF8Number writes a FLAC frame number, coded like UTF-8 (31 bits at most here).
func appendUTF8Number(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v < 0x800:
		return append(b, 0xC0|byte(v>>6), 0x80|byte(v&0x3F))
	case v < 0x10000:
		return append(b, 0xE0|byte(v>>12), 0x80|byte(v>>6&0x3F), 0x80|byte(v&0x3F))
	}
	return append(b, 0xF0|byte(v>>18&0x07), 0x80|byte(v>>12&0x3F), 0x80|byte(v>>6&0x3F), 0x80|byte(v&0x3F))
}

// crc8 is FLAC's frame header CRC: polynomial 0x07, initial 0.
func crc8(b []byte) byte { return byte(crc(b, 0x07, 8)) }

// crc16 is FLAC's frame CRC: polynomial 0x8005, initial 0.
func crc16(b []byte) uint16 { return uint16(crc(b, 0x8005, 16)) }

// crc is the CRC of b, most significant bit first, of width bits (8 to 32) with polynomial
// poly and initial value 0, computed bit by bit from the definition.
func crc(b []byte, poly uint32, width uint) uint32 {
	top := uint32(1) << (width - 1)
	mask := uint32(1<<width - 1)
	var c uint32
	for _, x := range b {
		c ^= uint32(x) << (width - 8)
		for range 8 {
			if c&top != 0 {
				c = (c<<1 ^ poly) & mask
			} else {
				c = c << 1 & mask
			}
		}
	}
	return c
}

// opusPacket is an Opus packet of one 20 ms CELT frame (TOC 0xF8: configuration 31, mono,
// one frame), 960 samples at 48 kHz, of noise.
func opusPacket(g *noise) []byte {
	p := []byte{0xF8}
	for range 40 {
		p = append(p, byte(g.next()))
	}
	return p
}

// OggOpus is an Ogg Opus file (no pre-skip) of packets packets of 20 ms, 50 a page, whose
// pages claim granule positions of at most granuleClaim and whose stream is marked ended on
// the first page that reaches it. With a decoy, an honest Opus stream of 1 s is multiplexed
// before it, which a decoder may pick.
func OggOpus(packets int, granuleClaim uint64, decoy bool) File {
	head := append([]byte("OpusHead\x01\x01\x00\x00"), le.AppendUint32(nil, 48000)...)
	head = append(head, 0, 0, 0)
	tags := []byte("OpusTags\x00\x00\x00\x00\x00\x00\x00\x00")
	g := noise(5)
	var out []byte
	name := "ogg opus granules say 1 s"
	if decoy {
		name = "ogg opus with a first stream of 1 s"
		second := make([][]byte, 50)
		for i := range second {
			second[i] = opusPacket(&g)
		}
		out = append(oggPage(2, 0x02, 0, 0, [][]byte{head}), oggPage(1, 0x02, 0, 0, [][]byte{head})...)
		out = append(append(out, oggPage(2, 0, 0, 1, [][]byte{tags})...), oggPage(2, 0x04, 48000, 2, second)...)
	} else {
		out = oggPage(1, 0x02, 0, 0, [][]byte{head})
	}
	out = append(out, oggPage(1, 0, 0, 1, [][]byte{tags})...)
	ended := false
	for i, seq := 0, uint32(2); i < packets; seq++ {
		var page [][]byte
		for ; i < packets && len(page) < 50; i++ {
			page = append(page, opusPacket(&g))
		}
		granule := min(uint64(i)*960, granuleClaim)
		flags := byte(0)
		if granule == granuleClaim && !ended || i == packets {
			flags, ended = 0x04, true
		}
		out = append(out, oggPage(1, flags, granule, seq, page)...)
	}
	return File{Name: name, Data: out, Length: length(uint64(packets)*960, 48000)}
}

// oggPage is one Ogg page of stream serial holding whole packets (each under 255 bytes).
func oggPage(serial uint32, flags byte, granule uint64, seq uint32, packets [][]byte) []byte {
	p := append([]byte("OggS\x00"), flags)
	p = le.AppendUint64(p, granule)
	p = le.AppendUint32(p, serial)
	p = le.AppendUint32(p, seq)
	p = le.AppendUint32(p, 0)
	p = append(p, byte(len(packets)))
	for _, k := range packets {
		p = append(p, byte(len(k)))
	}
	for _, k := range packets {
		p = append(p, k...)
	}
	le.PutUint32(p[22:], crc(p, 0x04C11DB7, 32))
	return p
}

// ebml is a Matroska element with an 8-byte size field.
func ebml(id uint32, payload ...[]byte) []byte {
	body := bytes.Join(payload, nil)
	idb := be.AppendUint32(nil, id)
	for len(idb) > 1 && idb[0] == 0 {
		idb = idb[1:]
	}
	return append(append(append(idb, 0x01), be.AppendUint64(nil, uint64(len(body)))[1:]...), body...)
}

// WebMOpus is a WebM of blocks Opus blocks of 20 ms in clusters of 50, whose Info claims a
// Duration of durationMs, whose track claims its blocks last 1 µs each and whose blocks all
// claim timestamp 0. With a decoy, a first audio track of 1 s comes before the one of
// blocks, which a decoder may pick.
func WebMOpus(blocks int, durationMs float64, decoy bool) File {
	out := ebml(0x1A45DFA3, ebml(0x4282, []byte("webm")))
	opusTrack := func(n byte, extra ...[]byte) []byte {
		return ebml(0xAE, append([][]byte{ebml(0xD7, []byte{n}), ebml(0x83, []byte{2}), ebml(0x86, []byte("A_OPUS"))}, extra...)...)
	}
	shortBlocks := ebml(0x23E383, be.AppendUint16(nil, 1000)) // DefaultDuration, ns
	tracks, track, name := opusTrack(1, shortBlocks), byte(1), "webm duration says 1 s, its blocks 1 µs"
	if decoy {
		tracks, track, name = append(opusTrack(1), opusTrack(2, shortBlocks)...), 2, "webm with a first audio track of 1 s"
	}
	seg := [][]byte{
		ebml(0x1549A966, ebml(0x2AD7B1, be.AppendUint32(nil, 1_000_000)), ebml(0x4489, be.AppendUint64(nil, math.Float64bits(durationMs)))),
		ebml(0x1654AE6B, tracks),
	}
	g := noise(9)
	for i := 0; i < blocks; {
		cluster := [][]byte{ebml(0xE7, []byte{0})}
		if decoy && i == 0 {
			for k := range 50 {
				cluster = append(cluster, ebml(0xA3, []byte{0x81}, be.AppendUint16(nil, uint16(20*k)), []byte{0x80}, opusPacket(&g)))
			}
		}
		for n := 0; i < blocks && n < 50; i, n = i+1, n+1 {
			cluster = append(cluster, ebml(0xA3, []byte{0x80 | track, 0, 0, 0x80}, opusPacket(&g)))
		}
		seg = append(seg, ebml(0x1F43B675, cluster...))
	}
	out = append(out, ebml(0x18538067, seg...)...)
	return File{Name: name, Data: out, Length: time.Duration(blocks) * 20 * time.Millisecond}
}

// box is an ISO BMFF box.
func box(typ string, payload ...[]byte) []byte {
	body := bytes.Join(payload, nil)
	return append(append(be.AppendUint32(nil, uint32(8+len(body))), typ...), body...)
}

// M4A is an M4A of frames AAC frames of 1,024 samples at rate, listed in its sample table,
// whose movie and media headers claim declared samples and whose edit list presents only
// those. With a decoy, a first sound track of 1 s comes before it, which a decoder may pick.
func M4A(frames int, rate uint32, declared uint32, decoy bool) File {
	full := func(v ...[]byte) []byte { return append([]byte{0, 0, 0, 0}, bytes.Join(v, nil)...) }
	u32 := func(v uint32) []byte { return be.AppendUint32(nil, v) }
	ms := uint32(uint64(declared) * 1000 / uint64(rate))
	g := noise(11)
	var mdat []byte
	trak := func(id uint32, frames int, declared, ms uint32) []byte {
		sizes := make([]byte, 0, 4*frames)
		for range frames {
			n := 20 + int(g.next()%40)
			sizes = be.AppendUint32(sizes, uint32(n))
			for range n {
				mdat = append(mdat, byte(g.next()))
			}
		}
		return box("trak",
			box("tkhd", full(u32(0), u32(0), u32(id), u32(0), u32(ms), make([]byte, 60))),
			box("edts", box("elst", full(u32(1), u32(ms), u32(0), u32(1<<16)))),
			box("mdia",
				box("mdhd", full(u32(0), u32(0), u32(rate), u32(declared), make([]byte, 4))),
				box("hdlr", full(u32(0), []byte("soun"), make([]byte, 12), []byte("audio\x00"))),
				box("minf", box("stbl",
					box("stts", full(u32(1), u32(uint32(frames)), u32(1024))),
					box("stsz", full(u32(0), u32(uint32(frames)), sizes))))))
	}
	var traks []byte
	name := "m4a headers and edit list say 1 s"
	if decoy {
		second := int(rate) / 1024
		traks = trak(1, second, uint32(second*1024), uint32(second*1024*1000)/rate)
		name = "m4a with a first sound track of 1 s"
	}
	traks = append(traks, trak(2, frames, declared, ms)...)
	moov := box("moov", box("mvhd", full(u32(0), u32(0), u32(1000), u32(ms), make([]byte, 80))), traks)
	out := append(box("ftyp", []byte("M4A "), u32(0), []byte("M4A isom")), moov...)
	out = append(out, box("mdat", mdat)...)
	return File{Name: name, Data: out, Length: length(uint64(frames)*1024, uint64(rate))}
}

// FragmentedM4A is a fragmented M4A of fragments fragments of 47 AAC frames of 1,024
// samples at rate (about a second each at 48 kHz), each of whose tfdt claims it starts at
// 0, and whose mvex/mehd claims a second in all.
func FragmentedM4A(fragments int, rate uint32) File {
	full := func(v ...[]byte) []byte { return append([]byte{0, 0, 0, 0}, bytes.Join(v, nil)...) }
	u32 := func(v uint32) []byte { return be.AppendUint32(nil, v) }
	const perFragment = 47
	moov := box("moov", box("mvhd", full(u32(0), u32(0), u32(1000), u32(0), make([]byte, 80))),
		box("trak",
			box("tkhd", full(u32(0), u32(0), u32(1), u32(0), u32(0), make([]byte, 60))),
			box("mdia",
				box("mdhd", full(u32(0), u32(0), u32(rate), u32(0), make([]byte, 4))),
				box("hdlr", full(u32(0), []byte("soun"), make([]byte, 12), []byte("audio\x00"))))),
		box("mvex", box("mehd", full(u32(1000))), box("trex", full(u32(1), u32(1), u32(1024), u32(0), u32(0)))))
	out := append(box("ftyp", []byte("iso5"), u32(0)), moov...)
	g := noise(17)
	for i := range fragments {
		mdat := make([]byte, perFragment*30)
		for k := range mdat {
			mdat[k] = byte(g.next())
		}
		traf := box("traf", box("tfhd", full(u32(1))), box("tfdt", full(u32(0))), box("trun", full(u32(perFragment))))
		out = append(out, box("moof", box("mfhd", full(u32(uint32(i+1)))), traf)...)
		out = append(out, box("mdat", mdat)...)
	}
	return File{Name: "m4a fragments each say they start at 0", Data: out, Length: length(uint64(fragments)*perFragment*1024, uint64(rate))}
}

// MatroskaPCM is a Matroska file of n samples of 16-bit mono PCM at 8 kHz in blocks of 160
// (20 ms), whose Info claims a Duration of 1 s and whose blocks all claim timestamp 0.
func MatroskaPCM(n int) File {
	audio := ebml(0xE1, ebml(0xB5, be.AppendUint64(nil, math.Float64bits(8000))), ebml(0x9F, []byte{1}), ebml(0x6264, []byte{16}))
	track := ebml(0xAE, ebml(0xD7, []byte{1}), ebml(0x83, []byte{2}), ebml(0x86, []byte("A_PCM/INT/LIT")), audio)
	seg := [][]byte{
		ebml(0x1549A966, ebml(0x2AD7B1, be.AppendUint32(nil, 1_000_000)), ebml(0x4489, be.AppendUint64(nil, math.Float64bits(1000)))),
		ebml(0x1654AE6B, track),
	}
	pcm := PCM(n, 19)
	cluster := [][]byte{ebml(0xE7, []byte{0})}
	for i := 0; i < n; i += 160 {
		block := []byte{0x81, 0, 0, 0x80}
		for _, v := range pcm[i:min(n, i+160)] {
			block = le.AppendUint16(block, uint16(v))
		}
		cluster = append(cluster, ebml(0xA3, block))
	}
	seg = append(seg, ebml(0x1F43B675, cluster...))
	out := append(ebml(0x1A45DFA3, ebml(0x4282, []byte("matroska"))), ebml(0x18538067, seg...)...)
	return File{Name: "matroska pcm duration says 1 s", Data: out, Length: length(uint64(n), 8000)}
}
