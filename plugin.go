// Package modelgateway plugs the model gateway into Caddy: build Caddy from a checkout with
// `CGO_ENABLED=1 xcaddy build --with github.com/modelgateway/caddy-modelgateway=.` and the
// model_gateway app, the model_gateway handler directive and the `caddy gateway` commands
// are there.
package modelgateway

import (
	// The module package registers the app, the handler, the Caddyfile syntax and the commands.
	_ "github.com/modelgateway/caddy-modelgateway/module"
)
