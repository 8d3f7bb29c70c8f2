// Command caddy is Caddy with the model gateway plugged in, for `go run ./cmd/caddy`.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/modelgateway/caddy-modelgateway"
)

func main() {
	caddycmd.Main()
}
