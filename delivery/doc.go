// Package delivery holds what the gateway needs to call a user's webhook receiver safely:
// Standard Webhooks signatures (Signer, NewSecret), an outbound HTTP client that refuses
// every address a user should not make the gateway reach (NewClient), and the sealing of
// signing secrets at rest (Sealer). It knows neither Caddy nor the store: the store keeps
// what this package seals, and the senders that run deliveries put the pieces together.
package delivery
