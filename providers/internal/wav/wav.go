// Package wav writes the header of a 16-bit PCM WAV file, for the adapters that wrap raw
// PCM audio (ElevenLabs, Gemini speech) and the mock's tone.
package wav

import "encoding/binary"

// HeaderSize is the length of the header AppendHeader writes.
const HeaderSize = 44

// unknown is the RIFF and data size of a file streamed before its length is known: players
// read it as "until the end".
const unknown = 0xFFFFFFFF

// AppendHeader appends the header of a 16-bit PCM WAV file of rate samples a second and
// channels channels, holding dataLen bytes of audio, or of unknown length when dataLen < 0.
func AppendHeader(dst []byte, rate, channels int, dataLen int64) []byte {
	riff, data := uint32(unknown), uint32(unknown)
	if dataLen >= 0 {
		riff, data = uint32(36+dataLen), uint32(dataLen)
	}
	dst = append(dst, "RIFF"...)
	dst = binary.LittleEndian.AppendUint32(dst, riff)
	dst = append(dst, "WAVEfmt "...)
	dst = binary.LittleEndian.AppendUint32(dst, 16) // fmt chunk size
	dst = binary.LittleEndian.AppendUint16(dst, 1)  // PCM
	dst = binary.LittleEndian.AppendUint16(dst, uint16(channels))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(rate))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(rate*channels*2)) // byte rate
	dst = binary.LittleEndian.AppendUint16(dst, uint16(channels*2))      // block align
	dst = binary.LittleEndian.AppendUint16(dst, 16)                      // bits per sample
	dst = append(dst, "data"...)
	return binary.LittleEndian.AppendUint32(dst, data)
}
