package blobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config is how to reach a bucket of an S3-compatible object store.
type S3Config struct {
	// Endpoint is the server's host and port, without a scheme ("s3.amazonaws.com",
	// "minio.internal:9000").
	Endpoint string
	// Bucket holds the blobs; it must exist.
	Bucket string
	// Region is the bucket's region; "" lets the client ask the server.
	Region string
	// AccessKeyID and SecretAccessKey sign the requests; both empty make anonymous ones.
	AccessKeyID, SecretAccessKey string
	// Secure uses HTTPS.
	Secure bool
	// PathStyle addresses the bucket in the path (endpoint/bucket/key), which most
	// self-hosted servers need, instead of as a subdomain (bucket.endpoint/key).
	PathStyle bool
	// PartSize is the size of the parts of a multipart upload, and so the memory each Put
	// of a blob larger than it holds. Default: DefaultPartSize.
	PartSize uint64
	// Transport carries the requests. Default: the client's own.
	Transport http.RoundTripper
}

// DefaultPartSize is S3Config.PartSize's default: above S3's 5 MiB minimum part, and with
// at most 10,000 parts it uploads blobs of up to 80 GiB.
const DefaultPartSize = 8 << 20

// s3UploadPrefix is where a Put of a blob too large to buffer uploads it before copying
// it to its key. Its first segment begins with '.', so no key names it. Objects left
// there by a process killed during a Put are garbage: a bucket lifecycle rule on the
// prefix removes them.
const s3UploadPrefix = ".uploads/"

// s3ProbeSize is how much of a blob of unknown size Put reads before choosing one PUT
// (the blob ended) or a multipart upload.
const s3ProbeSize = 1 << 20

// s3MaxCopySize is the largest object S3 copies in one request.
const s3MaxCopySize = 5 << 30

// s3ChecksumMeta is the user metadata (x-amz-meta-sha256) that keeps a blob's checksum.
const s3ChecksumMeta = "Sha256"

// S3 is a blob store in a bucket of an S3-compatible object store, through minio-go.
type S3 struct {
	core     *minio.Core
	bucket   string
	partSize uint64
}

// NewS3 returns the store of cfg's bucket. It makes no request: an unreachable server or
// a missing bucket fails the first call.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("s3 blob store: an endpoint is required")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("s3 blob store: endpoint %q: give the host and port without a scheme (use_tls chooses https)", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("s3 blob store: a bucket is required")
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("s3 blob store: give both the access key id and the secret access key, or neither")
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	core, err := minio.NewCore(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: lookup,
		Transport:    cfg.Transport,
	})
	if err != nil {
		// minio's errors name the endpoint, never the credentials.
		return nil, fmt.Errorf("s3 blob store: %w", err)
	}
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	return &S3{core: core, bucket: cfg.Bucket, partSize: partSize}, nil
}

// Put uploads the blob. A small blob (of a known size that fits in one part, or of an
// unknown size that ends within s3ProbeSize) is read into memory and sent in one PUT
// with its checksum. Any other is streamed in parts to a temporary object, then copied
// to its key with its checksum by the server: so a blob appears whole with its
// description, and a failed Put leaves the previous blob in place.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	contentType, err := checkPut(key, size, contentType)
	if err != nil {
		return Info{}, err
	}
	sum := sha256.New()
	src := &sizedReader{r: io.TeeReader(contextReader{ctx: ctx, r: r}, sum), size: size}
	// A blob that fits in one part goes in one PUT. One of an unknown size is read that
	// far only up to s3ProbeSize, so that a large one holds little more than its part.
	buffered := int64(s3ProbeSize)
	if size >= 0 && uint64(size) <= s.partSize {
		buffered = size
	}
	var rest io.Reader = src
	if size < 0 || uint64(size) <= s.partSize {
		head, err := io.ReadAll(io.LimitReader(src, buffered+1))
		if err != nil {
			return Info{}, fmt.Errorf("blob %q: %w", key, err)
		}
		if int64(len(head)) <= buffered {
			checksum := hex.EncodeToString(sum.Sum(nil))
			// The checksum known, the request is signed over it (x-amz-content-sha256)
			// rather than with a streaming signature (DisableContentSha256), which would
			// hash it again.
			if _, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(head), int64(len(head)), "", checksum, minio.PutObjectOptions{
				ContentType: contentType, UserMetadata: map[string]string{s3ChecksumMeta: checksum}, DisableContentSha256: true,
			}); err != nil {
				return Info{}, fmt.Errorf("blob %q: storing: %w", key, err)
			}
			return s.Stat(ctx, key)
		}
		rest = io.MultiReader(bytes.NewReader(head), src)
	}
	tmp := s3UploadPrefix + randomName()
	// Each part is buffered anyway, so its MD5 protects it in transit at the cost of one
	// hash; a streaming SHA-256 signature (aws-chunked) would hash it twice and is not
	// understood in upload parts by every S3-compatible server.
	if _, err := s.core.Client.PutObject(ctx, s.bucket, tmp, rest, -1, minio.PutObjectOptions{
		ContentType: contentType, PartSize: s.partSize, SendContentMd5: true, DisableContentSha256: true,
	}); err != nil {
		return Info{}, fmt.Errorf("blob %q: storing: %w", key, err)
	}
	defer func() {
		// The temporary object is garbage whatever happens next; a failure to remove it
		// leaves it to the lifecycle rule.
		_ = s.core.Client.RemoveObject(context.WithoutCancel(ctx), s.bucket, tmp, minio.RemoveObjectOptions{})
	}()
	dst := minio.CopyDestOptions{
		Bucket: s.bucket, Object: key, ReplaceMetadata: true, ContentType: contentType,
		UserMetadata: map[string]string{s3ChecksumMeta: hex.EncodeToString(sum.Sum(nil))},
	}
	srcObject := minio.CopySrcOptions{Bucket: s.bucket, Object: tmp}
	copyObject := s.core.Client.CopyObject
	if src.n > s3MaxCopySize {
		// Larger objects are copied in parts (UploadPartCopy).
		copyObject = func(ctx context.Context, dst minio.CopyDestOptions, src minio.CopySrcOptions) (minio.UploadInfo, error) {
			return s.core.Client.ComposeObject(ctx, dst, src)
		}
	}
	if _, err := copyObject(ctx, dst, srcObject); err != nil {
		return Info{}, fmt.Errorf("blob %q: moving into place: %w", key, err)
	}
	return s.Stat(ctx, key)
}

func randomName() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Open sends one GET with the range.
func (s *S3) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, Info, error) {
	if err := checkRange(offset, length); err != nil {
		return nil, Info{}, err
	}
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	if length == 0 {
		// HTTP has no empty range: the blob's description is all there is to get.
		info, err := s.Stat(ctx, key)
		if err != nil {
			return nil, Info{}, err
		}
		if offset > info.Size {
			return nil, Info{}, fmt.Errorf("blob %q: %w: offset %d past its %d bytes", key, ErrInvalidRange, offset, info.Size)
		}
		return io.NopCloser(bytes.NewReader(nil)), info, nil
	}
	var opts minio.GetObjectOptions
	ranged := offset > 0 || length > 0
	if ranged {
		end := int64(0) // to the end
		if length > 0 {
			end = offset + length - 1
		}
		if offset == 0 && end == 0 {
			// SetRange(0, 0) would read the whole blob, not its first byte.
			opts.Set("Range", "bytes=0-0")
		} else if err := opts.SetRange(offset, end); err != nil {
			return nil, Info{}, fmt.Errorf("blob %q: %w: %w", key, ErrInvalidRange, err)
		}
	}
	body, oi, header, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		if code := minio.ToErrorResponse(err).Code; code == minio.InvalidRange {
			// The offset is at the end (an empty read, as for FS) or past it.
			info, serr := s.Stat(ctx, key)
			if serr != nil {
				return nil, Info{}, serr
			}
			if offset == info.Size {
				return io.NopCloser(bytes.NewReader(nil)), info, nil
			}
			return nil, Info{}, fmt.Errorf("blob %q: %w: offset %d past its %d bytes", key, ErrInvalidRange, offset, info.Size)
		}
		return nil, Info{}, s.failure(key, err)
	}
	info := s.info(key, oi)
	if ranged {
		total, ok := totalFromContentRange(header.Get("Content-Range"))
		if !ok {
			_ = body.Close()
			return nil, Info{}, fmt.Errorf("blob %q: the server answered a range request without a usable Content-Range", key)
		}
		info.Size = total
	}
	return body, info, nil
}

// totalFromContentRange reads the complete length of "bytes a-b/total".
func totalFromContentRange(v string) (int64, bool) {
	_, total, ok := strings.Cut(v, "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil && n >= 0
}

// Stat sends a HEAD.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	oi, err := s.core.Client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, s.failure(key, err)
	}
	return s.info(key, oi), nil
}

func (s *S3) info(key string, oi minio.ObjectInfo) Info {
	info := Info{Key: key, Size: oi.Size, ContentType: oi.ContentType, ModTime: oi.LastModified}
	for k, v := range oi.UserMetadata {
		if strings.EqualFold(k, s3ChecksumMeta) {
			info.SHA256 = v
		}
	}
	if info.SHA256 == "" {
		// Some servers list user metadata only in the raw headers.
		info.SHA256 = oi.Metadata.Get("X-Amz-Meta-" + s3ChecksumMeta)
	}
	return info
}

// failure maps a missing object to ErrNotFound.
func (s *S3) failure(key string, err error) error {
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return fmt.Errorf("blob %q: %w", key, ErrNotFound)
	}
	return fmt.Errorf("blob %q: %w", key, err)
}

// Delete removes the object; S3 answers a delete of a missing object with success.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := s.core.Client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil
		}
		return fmt.Errorf("blob %q: %w", key, err)
	}
	return nil
}

var _ Store = (*S3)(nil)
