package module

import (
	"context"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
)

func init() {
	backgroundWorkers = append(backgroundWorkers, worker{Name: "files expiry", Run: runFilesExpiry})
}

// filesSweepEvery is how often the files worker looks for expired and deleted files whose
// blobs are to be removed: an expired file already answers 404, so the removal may lag. It
// is atomic because every gateway of a process reads it (tests shorten it).
var filesSweepEvery = sweepInterval(time.Minute)

// runFilesExpiry removes the blobs and records of expired and deleted files (files.Sweep)
// from the blob store of the newest started configuration, until the store handle ends.
func runFilesExpiry(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	return runBlobSweep(ctx, rt, filesSweepEvery, func(ctx context.Context, b blobs.Store, logf func(string, error)) (int, error) {
		return files.Sweep(ctx, rt.Store(), b, time.Now(), logf)
	})
}
