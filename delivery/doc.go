// Package delivery holds what the gateway needs to call a user's webhook receiver safely:
// Standard Webhooks signatures (Signer, NewSecret), an outbound HTTP client that refuses
// every address a user should not make the gateway reach (NewClient), the sealing of
// signing secrets at rest (Sealer), and the Sender, which delivers the store's outbox with
// them. It knows nothing of Caddy: the module runs the Sender as a worker.
package delivery
