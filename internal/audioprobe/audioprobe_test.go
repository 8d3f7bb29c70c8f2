package audioprobe

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
	"testing/iotest"
	"time"
)

// seconds is n samples at rate, as Duration rounds it.
func seconds(n, rate uint64) time.Duration {
	d, _ := samples(n, rate)
	return d
}

type probeCase struct {
	name   string
	data   []byte
	format Format
	want   time.Duration
	err    error // when set, the error Duration must wrap
}

func probeCases() []probeCase {
	mp3a := [4]byte{0xFF, 0xFB, 0x90, 0x00}    // MPEG-1 layer III, 128 kbit/s, 44.1 kHz: 417 bytes
	mp3aPad := [4]byte{0xFF, 0xFB, 0x92, 0x00} // the same, padded: 418 bytes
	pcm := make([]byte, 176400)                // 1 s of 16-bit stereo at 44.1 kHz
	return []probeCase{
		// WAV
		{name: "wav pcm", data: wavFile(fmtPCM(1, 2, 44100, 16), riffChunk("data", pcm)), format: WAV, want: time.Second},
		{name: "wav extensible float", data: wavFile(fmtExtensible(3, 1, 48000, 32), riffChunk("data", make([]byte, 4*24000))), format: WAV, want: 500 * time.Millisecond},
		{name: "wav data before fmt, odd LIST", data: wavFile(riffChunk("LIST", []byte("abc")), riffChunk("data", make([]byte, 8000)), riffChunk("junk", make([]byte, 7)), fmtPCM(1, 1, 8000, 8)), format: WAV, want: time.Second},
		{name: "wav trailing chunks after data", data: wavFile(fmtPCM(1, 1, 16000, 16), riffChunk("data", make([]byte, 16000)), riffChunk("LIST", make([]byte, 99))), format: WAV, want: 500 * time.Millisecond},
		{name: "wav streamed placeholder size", data: cat([]byte("RIFF"), u32le(0xFFFFFFFF), []byte("WAVE"), fmtPCM(1, 1, 8000, 16), []byte("data"), u32le(0xFFFFFFFF), make([]byte, 4000)), format: WAV, want: 250 * time.Millisecond},
		{name: "wav zero data size", data: cat(wavFile(fmtPCM(1, 1, 8000, 16)), []byte("data"), u32le(0), make([]byte, 8000)), format: WAV, want: 500 * time.Millisecond},
		{name: "wav truncated", data: cat(wavFile(fmtPCM(1, 2, 44100, 16)), []byte("data"), u32le(176400), make([]byte, 44100)), format: WAV, want: 250 * time.Millisecond},
		{name: "wav rf64", data: cat([]byte("RF64"), u32le(0xFFFFFFFF), []byte("WAVE"), riffChunk("ds64", cat(u64le(0), u64le(24000), u64le(0), u32le(0))), fmtPCM(1, 1, 48000, 16), []byte("data"), u32le(0xFFFFFFFF), make([]byte, 24000)), format: WAV, want: 250 * time.Millisecond},
		{name: "wav adpcm with fact", data: wavFile(riffChunk("fmt ", cat(u16le(0x11), u16le(1), u32le(8000), u32le(4055), u16le(256), u16le(4), u16le(2), u16le(505))), riffChunk("fact", u32le(12000)), riffChunk("data", make([]byte, 6144))), format: WAV, want: 1500 * time.Millisecond},
		{name: "wav mp3 inside, byte rate", data: wavFile(riffChunk("fmt ", cat(u16le(0x55), u16le(1), u32le(22050), u32le(4000), u16le(1), u16le(0))), riffChunk("data", make([]byte, 10000))), format: WAV, want: 2500 * time.Millisecond},
		{name: "wav without data", data: wavFile(fmtPCM(1, 1, 8000, 16)), format: WAV, err: ErrMalformed},
		{name: "wav without fmt", data: wavFile(riffChunk("data", make([]byte, 100))), format: WAV, err: ErrMalformed},
		{name: "wav empty data", data: wavFile(fmtPCM(1, 1, 8000, 16), riffChunk("data", nil)), format: WAV, err: ErrMalformed},

		// MP3
		{name: "mp3 mpeg1 layer3 cbr", data: mpegFrames(mp3a, 417, 100), format: MP3, want: seconds(100*1152, 44100)},
		{name: "mp3 padded frames", data: cat(mpegFrames(mp3a, 417, 3), mpegFrames(mp3aPad, 418, 1), mpegFrames(mp3a, 417, 3), mpegFrames(mp3aPad, 418, 1)), format: MP3, want: seconds(8*1152, 44100)},
		{name: "mp3 mpeg2 layer3 mono", data: mpegFrames([4]byte{0xFF, 0xF3, 0x80, 0xC0}, 208, 50), format: MP3, want: seconds(50*576, 22050)},
		{name: "mp3 mpeg2.5 layer3", data: mpegFrames([4]byte{0xFF, 0xE3, 0x18, 0x00}, 72, 40), format: MP3, want: seconds(40*576, 8000)},
		{name: "mp3 layer1", data: mpegFrames([4]byte{0xFF, 0xFF, 0x10, 0x00}, 32, 30), format: MP3, want: seconds(30*384, 44100)},
		{name: "mp3 layer2", data: mpegFrames([4]byte{0xFF, 0xFD, 0xA4, 0x00}, 576, 25), format: MP3, want: seconds(25*1152, 48000)},
		{name: "mp3 tags at both ends", data: cat(id3v2(700), mpegFrames(mp3a, 417, 20), apeTag(), id3v1()), format: MP3, want: seconds(20*1152, 44100)},
		{name: "mp3 two id3v2 and padding", data: cat(id3v2(30), id3v2(50), make([]byte, 300), mpegFrames(mp3a, 417, 10)), format: MP3, want: seconds(10*1152, 44100)},
		{name: "mp3 junk between frames", data: cat(mpegFrames(mp3a, 417, 5), []byte{0xFF, 0xFB, 0x00, 1, 2, 3, 0xFF}, mpegFrames(mp3a, 417, 5)), format: MP3, want: seconds(10*1152, 44100)},
		{name: "mp3 truncated last frame", data: cat(mpegFrames(mp3a, 417, 10), mpegFrames(mp3a, 417, 1)[:100]), format: MP3, want: seconds(11*1152, 44100)},
		{name: "mp3 xing", data: cat(xingFrame("Xing", 1000, false, 0, 0), mpegFrames(mp3a, 417, 3)), format: MP3, want: seconds(1000*1152, 44100)},
		{name: "mp3 info with lame tag", data: cat(id3v2(100), xingFrame("Info", 100, true, 576, 1000), mpegFrames(mp3a, 417, 3)), format: MP3, want: seconds(100*1152-1576, 44100)},
		{name: "mp3 xing without count", data: cat(xingFrame("Xing", 0, false, 0, 0)[:40], make([]byte, 377), mpegFrames(mp3a, 417, 4)), format: MP3, want: seconds(4*1152, 44100)},
		{name: "mp3 vbri", data: cat(vbriFrame(500), mpegFrames(mp3a, 417, 3)), format: MP3, want: seconds(500*1152, 44100)},
		{name: "mp3 tag and no frames", data: cat(id3v2(100), []byte("not audio at all")), err: ErrUnknownFormat},

		// AAC in ADTS
		{name: "aac adts", data: adtsFrames(371, 1, 43), format: AAC, want: seconds(43*1024, 44100)},
		{name: "aac adts two blocks a frame, id3", data: cat(id3v2(40), adtsFrames(700, 2, 10), id3v1()), format: AAC, want: seconds(20*1024, 44100)},
		{name: "aac adts frames longer than the buffer", data: adtsFrames(6000, 1, 5), format: AAC, want: seconds(5*1024, 44100)},

		// WebM
		{name: "webm recording", data: webmRecording(173), format: WebM, want: 173 * 20 * time.Millisecond},
		{name: "webm with info duration", data: cat(ebml(ebmlHeader), ebml(mkvSegment, ebml(mkvInfo, ebml(mkvScale, ebmlUintBody(1000)), ebml(mkvDuration, be.AppendUint64(nil, math.Float64bits(2500123)))))), format: WebM, want: 2500123 * time.Microsecond},
		{name: "webm block groups", data: cat(ebml(ebmlHeader), ebml(mkvSegment,
			ebml(mkvTracks, ebml(mkvTrackEntry, ebml(mkvTrackNumber, []byte{1}), ebml(mkvTrackType, []byte{2}), ebml(mkvCodecID, []byte("A_VORBIS")))),
			ebml(mkvCluster, ebml(mkvTimestamp, []byte{0x03, 0xE8}),
				ebml(mkvBlockGroup, ebml(mkvBlock, []byte{0x81, 0, 0, 0, 1, 2, 3}), ebml(mkvBlockDur, []byte{100})),
				ebml(mkvBlockGroup, ebml(mkvBlock, []byte{0x81, 0x01, 0xF4, 0, 1, 2, 3}), ebml(mkvBlockDur, []byte{0x01, 0x2C}))))),
			format: WebM, want: 1800 * time.Millisecond},
		{name: "webm without audio", data: cat(ebml(ebmlHeader), ebml(mkvSegment, ebml(mkvTracks, ebml(mkvTrackEntry, ebml(mkvTrackNumber, []byte{1}), ebml(mkvTrackType, []byte{1}))))), format: WebM, err: ErrMalformed},

		// FLAC
		{name: "flac", data: flacFile(44100, 441000), format: FLAC, want: 10 * time.Second},
		{name: "flac 36-bit total", data: flacFile(96000, 1<<33+48000), format: FLAC, want: seconds(1<<33+48000, 96000)},
		{name: "flac after id3v2", data: cat(id3v2(64), flacFile(16000, 24000)), format: FLAC, want: 1500 * time.Millisecond},
		{name: "flac unknown total, fixed blocks", data: func() []byte {
			b := flacFile(16000, 0)[:4+4+34+4+16] // STREAMINFO (block size 4096) and PADDING
			for i := range 200 {
				b = append(b, flacFrame(false, uint64(i), 0xC, 4096)...) // code 12: 4096
			}
			return append(b, flacFrame(false, 200, 6, 100)...) // a short last block
		}(), format: FLAC, want: seconds(200*4096+100, 16000)},
		{name: "flac unknown total, variable blocks", data: func() []byte {
			b := flacFile(8000, 0)[:4+4+34+4+16]
			var n uint64
			for i := range 20 {
				size := 1000 + i
				b = append(b, flacFrame(true, n, 7, size)...)
				n += uint64(size)
			}
			// A damaged header (bad CRC) and a header out of sequence do not count.
			bad := flacFrame(true, n, 7, 5000)
			bad[7] ^= 0xFF
			return cat(b, bad, flacFrame(true, n+9999, 7, 5000))
		}(), format: FLAC, want: seconds(20*1000+190, 8000)},
		{name: "flac unknown total, no frames", data: flacFile(44100, 0)[:4+4+34+4+16], format: FLAC, err: ErrMalformed},
		{name: "flac without streaminfo", data: cat([]byte("fLaC"), []byte{0x84, 0, 0, 4}, []byte("abcd")), format: FLAC, err: ErrMalformed},

		// Ogg
		{name: "ogg opus", data: oggStream(7, opusHead(312), 48000, 96312), format: Opus, want: 2 * time.Second},
		{name: "ogg vorbis", data: oggStream(9, vorbisIdent(44100), 44100, 88200, 132300), format: Vorbis, want: 3 * time.Second},
		{name: "ogg opus with skeleton", data: cat(oggPage(0x02, 0, 1, 0, []byte("fishead\x00skeleton")), oggPage(0x02, 0, 2, 0, opusHead(0)),
			oggPage(0x04, 0, 1, 1, nil), oggPage(0, 0, 2, 1, []byte("OpusTags")), oggPage(0x04, 24000, 2, 2, make([]byte, 400))), format: Opus, want: 500 * time.Millisecond},
		{name: "ogg chained links", data: cat(oggStream(1, opusHead(100), 48100), oggStream(2, opusHead(0), 96000)), format: Opus, want: 3 * time.Second},
		{name: "ogg corrupt page ignored", data: func() []byte {
			bad := oggPage(0, 1<<40, 7, 3, make([]byte, 10))
			bad[len(bad)-1] ^= 1
			return cat(oggPage(0x02, 0, 7, 0, opusHead(0)), oggPage(0, 48000, 7, 1, make([]byte, 10)), bad)
		}(), format: Opus, want: time.Second},
		{name: "ogg junk before a page", data: cat(oggPage(0x02, 0, 7, 0, opusHead(0)), []byte("junkOgg"), oggPage(0, 72000, 7, 1, make([]byte, 10))), format: Opus, want: 1500 * time.Millisecond},
		{name: "ogg flac", data: oggStream(3, cat([]byte("\x7fFLAC\x01\x00\x00\x01fLaC"), []byte{0x00, 0, 0, 34}, streamInfoBody(8000, 1, 16, 0)), 4000, 12000), format: OggFLAC, want: 1500 * time.Millisecond},
		{name: "ogg without audio", data: oggStream(3, []byte("\x80theora"), 100), err: ErrMalformed},

		// MP4
		{name: "m4a moov after mdat", data: cat(ftypM4A, box("mdat", make([]byte, 100000)), box("moov", timeBox("mvhd", 0, 1000, 2500), trak("soun", 44100, 110250))), format: MP4, want: 2500 * time.Millisecond},
		{name: "m4a moov first", data: cat(ftypM4A, box("moov", timeBox("mvhd", 0, 1000, 2500), trak("soun", 44100, 110250)), box("mdat", make([]byte, 1000))), format: MP4, want: 2500 * time.Millisecond},
		{name: "mp4 video track first", data: cat(ftypM4A, box("moov", timeBox("mvhd", 0, 600, 6000), trak("vide", 30000, 300000), trak("soun", 48000, 96000)), box("mdat", nil)), format: MP4, want: 2 * time.Second},
		{name: "mp4 version 1 and large mdat", data: cat(ftypM4A, largeBox("mdat", make([]byte, 5000)), box("moov", timeBox("mvhd", 1, 1000, 2000),
			box("trak", box("mdia", timeBox("mdhd", 1, 16000, 1<<33), hdlr("soun"))))), format: MP4, want: seconds(1<<33, 16000)},
		{name: "mp4 movie header only", data: cat(ftypM4A, box("moov", timeBox("mvhd", 0, 1000, 1234))), format: MP4, want: 1234 * time.Millisecond},
		{name: "m4a edit list trims priming", data: cat(ftypM4A, box("moov", timeBox("mvhd", 0, 1000, 1628), trak("soun", 8000, 13024, elst([2]int32{1500, 1024}))), box("mdat", nil)), format: MP4, want: 1500 * time.Millisecond},
		{name: "mp4 fragmented", data: cat(ftypM4A, box("moov", timeBox("mvhd", 0, 1000, 0), trak("soun", 48000, 0), box("mvex", box("mehd", []byte{0, 0, 0, 0}, u32be(4500)))), box("moof", make([]byte, 50))), format: MP4, want: 4500 * time.Millisecond},
		{name: "mp4 fragments with tfdt", data: fragmentedM4A(true, 10), format: MP4, want: seconds(30*1024, 48000)},
		{name: "mp4 fragments without tfdt", data: fragmentedM4A(false, 10), format: MP4, want: seconds(30*1024, 48000)},
		{name: "mp4 fragment of 3000 samples", data: fragmentedM4A(true, 3000), format: MP4, want: seconds(3020*1024, 48000)},
		{name: "mp4 mdat to the end", data: cat(ftypM4A, box("moov", timeBox("mvhd", 0, 1000, 750)), u32be(0), []byte("mdat"), make([]byte, 3000)), format: MP4, want: 750 * time.Millisecond},
		{name: "mp4 without moov", data: cat(ftypM4A, box("mdat", make([]byte, 100))), format: MP4, err: ErrMalformed},
		{name: "mp4 box larger than parent", data: cat(ftypM4A, box("moov", u32be(4000), []byte("trak"))), format: MP4, err: ErrMalformed},

		// Neither
		{name: "empty", data: nil, err: ErrUnknownFormat},
		{name: "text", data: []byte("hello, this is not audio"), err: ErrUnknownFormat},
		{name: "a lone frame header", data: []byte{0xFF, 0xFB, 0x90, 0x00}, err: ErrUnknownFormat},
		{name: "a single frame", data: mpegFrames(mp3a, 417, 1), format: MP3, want: seconds(1152, 44100)},
		{name: "random bytes with syncs", data: bytes.Repeat([]byte{0xFF, 0xFB, 0x90, 0x00, 0x13, 0x37}, 500), err: ErrUnknownFormat},
	}
}

// readers feed the same bytes in the ways a network or a file may deliver them: seekable
// ones (skipped past by seeking) and others (read through) must agree.
var readers = map[string]func([]byte) io.Reader{
	"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
	"section":  func(b []byte) io.Reader { return io.NewSectionReader(bytes.NewReader(b), 0, int64(len(b))) },
	"stream":   func(b []byte) io.Reader { return struct{ io.Reader }{bytes.NewReader(b)} },
	"one byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
	"half":     func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
	"data+EOF": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
}

func TestDuration(t *testing.T) {
	for _, tc := range probeCases() {
		t.Run(tc.name, func(t *testing.T) {
			for rname, mk := range readers {
				d, f, err := Duration(mk(tc.data))
				if tc.err != nil {
					if !errors.Is(err, tc.err) {
						t.Fatalf("%s: got %v, %q, %v; want error %v", rname, d, f, err, tc.err)
					}
					if d != 0 {
						t.Errorf("%s: duration %v with an error", rname, d)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", rname, err)
				}
				if d != tc.want || f != tc.format {
					t.Errorf("%s: got %v %q, want %v %q", rname, d, f, tc.want, tc.format)
				}
			}
		})
	}
}

// A failing reader's error reaches the caller, wrapped, not taken for the end of the file.
func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range probeCases() {
		if tc.err != nil || len(tc.data) < 200 {
			continue
		}
		r := io.MultiReader(bytes.NewReader(tc.data[:len(tc.data)/2]), iotest.ErrReader(boom))
		d, _, err := Duration(r)
		if err == nil {
			// Some formats are measured from their first half (a Xing header, STREAMINFO, moov).
			continue
		}
		if !errors.Is(err, boom) {
			t.Errorf("%s: got %v, %v; want the reader's error", tc.name, d, err)
		}
	}
}

func TestSamples(t *testing.T) {
	for _, tc := range []struct {
		n, rate uint64
		want    time.Duration
		ok      bool
	}{
		{44100, 44100, time.Second, true},
		{1, 3, 333333333 * time.Nanosecond, true},
		{2, 3, 666666667 * time.Nanosecond, true},
		{1<<36 - 1, 1, 0, false},
		{1<<36 - 1, 655350, seconds(1<<36-1, 655350), true},
		{5, 0, 0, false},
	} {
		if got, ok := samples(tc.n, tc.rate); ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("samples(%d, %d) = %v, %v; want %v, %v", tc.n, tc.rate, got, ok, tc.want, tc.ok)
		}
	}
}

// The checksums against their published check values (of "123456789"): CRC-8 with
// polynomial 0x07 is 0xF4, CRC-16 with 0x8005 0xFEE8; the Ogg table is checked against the bitwise oggChecksum.
func TestChecksums(t *testing.T) {
	if got := flacCRC8([]byte("123456789")); got != 0xF4 {
		t.Errorf("flacCRC8 = %#x, want 0xf4", got)
	}
	// FLAC's CRC-16 is CRC-16/UMTS (BUYPASS): 0xFEE8.
	var w flacCRCWalk
	w.header(1)
	if w.update([]byte("123456789")); w.open[0].crc != 0xFEE8 {
		t.Errorf("FLAC CRC-16 = %#x, want 0xfee8", w.open[0].crc)
	}
	for _, s := range []string{"", "123456789", "OggS\x00\x02 and more bytes"} {
		if got, want := oggUpdate(0, []byte(s)), oggChecksum([]byte(s)); got != want {
			t.Errorf("oggUpdate(%q) = %#x, want %#x", s, got, want)
		}
	}
}
