package mock

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func decodeImage(t *testing.T, img providers.GeneratedImage) image.Image {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(img.B64JSON)
	if err != nil {
		t.Fatal(err)
	}
	var m image.Image
	switch img.MIMEType {
	case "image/png":
		m, err = png.Decode(bytes.NewReader(b))
	case "image/jpeg":
		m, err = jpeg.Decode(bytes.NewReader(b))
	default:
		t.Fatalf("type %q", img.MIMEType)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGenerateImages(t *testing.T) {
	tests := []struct {
		name          string
		req           providers.ImageRequest
		n             int
		size, quality string
		w, h          int
		mimeType      string
	}{
		{"defaults", providers.ImageRequest{Prompt: "a cat"}, 1, "1024x1024", "standard", 8, 8, "image/png"},
		{"auto", providers.ImageRequest{Prompt: "a cat", N: 3, Size: "auto", Quality: "auto"}, 3, "1024x1024", "standard", 8, 8, "image/png"},
		{"landscape hd", providers.ImageRequest{Prompt: "a cat", N: 2, Size: "1536x1024", Quality: "high"}, 2, "1536x1024", "high", 12, 8, "image/png"},
		{"jpeg", providers.ImageRequest{Prompt: "a cat", Size: "256x512", OutputFormat: "jpeg"}, 1, "256x512", "standard", 2, 4, "image/jpeg"},
		{"huge", providers.ImageRequest{Prompt: "a cat", Size: "16384x64"}, 1, "16384x64", "standard", 64, 1, "image/png"},
	}
	p := New(Config{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Model = "mock-image"
			resp, err := p.GenerateImages(context.Background(), &tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Images) != tc.n || resp.Size != tc.size || resp.Quality != tc.quality || resp.UsageKnown {
				t.Fatalf("response %d images %q %q %v", len(resp.Images), resp.Size, resp.Quality, resp.UsageKnown)
			}
			for _, img := range resp.Images {
				if img.MIMEType != tc.mimeType {
					t.Errorf("type %q", img.MIMEType)
				}
				if b := decodeImage(t, img).Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
					t.Errorf("image of %v, want %dx%d", b, tc.w, tc.h)
				}
			}
			if tc.n > 1 && resp.Images[0] == resp.Images[1] {
				t.Error("the images of one request are all the same")
			}
			again, _ := p.GenerateImages(context.Background(), &tc.req)
			if again.Images[0] != resp.Images[0] {
				t.Error("the same request made a different image")
			}
		})
	}
}

func TestGenerateImagesDependOnInputs(t *testing.T) {
	p := New(Config{})
	first := func(req providers.ImageRequest) string {
		t.Helper()
		resp, err := p.GenerateImages(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Images[0].B64JSON
	}
	base := first(providers.ImageRequest{Prompt: "a cat"})
	seen := map[string]string{base: "base"}
	for name, req := range map[string]providers.ImageRequest{
		"prompt": {Prompt: "a dog"},
		"edit":   {Prompt: "a cat", Images: []providers.ImageInput{{Data: []byte("one")}}},
		"mask":   {Prompt: "a cat", Images: []providers.ImageInput{{Data: []byte("one")}}, Mask: &providers.ImageInput{Data: []byte("m")}},
	} {
		img := first(req)
		if other, ok := seen[img]; ok {
			t.Errorf("%s makes the same image as %s", name, other)
		}
		seen[img] = name
	}
}

func TestGenerateImagesInvalid(t *testing.T) {
	p := New(Config{})
	for name, req := range map[string]providers.ImageRequest{
		"size":     {Prompt: "x", Size: "big"},
		"zero":     {Prompt: "x", Size: "0x1024"},
		"too many": {Prompt: "x", N: 11},
	} {
		_, err := p.GenerateImages(context.Background(), &req)
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryInvalidRequest {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestReadDocument(t *testing.T) {
	tests := []struct {
		name  string
		req   providers.OCRRequest
		pages []int
		doc   string
	}{
		{"whole document", providers.OCRRequest{DocumentURL: "https://example.com/report.pdf"}, []int{0}, "https://example.com/report.pdf"},
		{"pages asked", providers.OCRRequest{DocumentURL: "https://example.com/report.pdf", Pages: []int{4, 1, 4}}, []int{1, 4}, "https://example.com/report.pdf"},
		{"data URL", providers.OCRRequest{DocumentURL: "data:application/pdf;base64,JVBERi0xLjcK", Pages: []int{2}}, []int{2}, "data:application/pdf;base64"},
		{"image", providers.OCRRequest{DocumentURL: "data:image/png;base64,iVBORw0KGgo=", IsImage: true}, []int{0}, "data:image/png;base64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := New(Config{}).ReadDocument(context.Background(), &tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Pages) != len(tc.pages) || resp.Usage != (providers.MediaUsage{Pages: int64(len(tc.pages))}) {
				t.Fatalf("response %+v", resp)
			}
			for i, pg := range resp.Pages {
				want := "# Page " + string(rune('1'+tc.pages[i])) + "\n\nmock text of " + tc.doc
				if pg.Index != tc.pages[i] || pg.Markdown != want {
					t.Errorf("page %d: %+v, want index %d %q", i, pg, tc.pages[i], want)
				}
			}
		})
	}
	for name, req := range map[string]providers.OCRRequest{
		"no document":   {},
		"negative page": {DocumentURL: "https://example.com/a.pdf", Pages: []int{-1}},
	} {
		_, err := New(Config{}).ReadDocument(context.Background(), &req)
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryInvalidRequest {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestDocumentNameIsShortAndWhole(t *testing.T) {
	long := "https://example.com/" + strings.Repeat("é", 200) + ".pdf"
	got := documentName(long)
	if len(got) > 256 || !utf8.ValidString(got) || !strings.HasPrefix(long, got) {
		t.Fatalf("documentName kept %d bytes (valid UTF-8 %v)", len(got), utf8.ValidString(got))
	}
	if got := documentName("data:application/pdf;base64,JVBERi0xLjQK"); got != "data:application/pdf;base64" {
		t.Fatalf("data URL named %q", got)
	}
}
