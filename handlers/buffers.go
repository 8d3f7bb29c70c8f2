package handlers

import "github.com/modelgateway/caddy-modelgateway/internal/bufs"

// answerBufs hold what a complete answer is read into and built in: the upstream's answer,
// the encoded and the decorated answer.
var answerBufs = &bufs.Pool{Size: 4096, Max: 64 << 10}

// decorationBufs hold the values decoration sets in an answer (costed usage, id, meta), a
// few hundred bytes. A pool of their own: sharing answerBufs, their small buffers would
// take the place of answers' large ones (and, under the race detector's pool drops, make
// answers' buffers grow again: TestForwardedAnswerBytesDoNotGrowWithIt).
var decorationBufs = &bufs.Pool{Size: 1024, Max: bufs.KeptRoom}
