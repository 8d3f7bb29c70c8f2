package handlers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

const (
	keyPrefix = "gateway_v1_"
	// kidLen and secretLen are the lengths of the parts of keys this gateway makes. Parsing
	// accepts other lengths within bounds so keys imported from elsewhere keep working.
	kidLen    = 12
	secretLen = 40
	maxKeyLen = 256
)

var kindMarkers = map[store.KeyKind]string{store.KeyStandard: "sk", store.KeyManagement: "mk"}

// ParsedKey is the structure of a plaintext key.
type ParsedKey struct {
	Kind   store.KeyKind
	ID     string
	Secret string
}

var errMalformedKey = errors.New("malformed API key")

// ParseKey splits gateway_v1_<sk|mk>_<kid>_<secret>. The kid and the secret are
// lowercase letters and digits.
func ParseKey(s string) (ParsedKey, error) {
	if len(s) > maxKeyLen || !strings.HasPrefix(s, keyPrefix) {
		return ParsedKey{}, errMalformedKey
	}
	parts := strings.Split(s[len(keyPrefix):], "_")
	if len(parts) != 3 {
		return ParsedKey{}, errMalformedKey
	}
	var kind store.KeyKind
	switch parts[0] {
	case "sk":
		kind = store.KeyStandard
	case "mk":
		kind = store.KeyManagement
	default:
		return ParsedKey{}, errMalformedKey
	}
	if !validToken(parts[1], 4, 64) || !validToken(parts[2], 16, 128) {
		return ParsedKey{}, errMalformedKey
	}
	return ParsedKey{Kind: kind, ID: parts[1], Secret: parts[2]}, nil
}

func validToken(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// HashSecret is what the store keeps of a key's secret. Secrets are 200+ random bits, so a
// plain SHA-256 cannot be reversed by guessing.
func HashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// NewKey makes a key for a workspace: the record to store and the plaintext to show once.
// A management key is an owner with every scope; its creator narrows it (GrantScopes).
func NewKey(workspaceID string, kind store.KeyKind, name string) (store.Key, string, error) {
	marker, ok := kindMarkers[kind]
	if !ok {
		return store.Key{}, "", fmt.Errorf("unknown key kind %q", kind)
	}
	kid, secret := ids.Token(kidLen), ids.Token(secretLen)
	k := store.Key{ID: kid, WorkspaceID: workspaceID, Kind: kind, Name: name, SecretHash: HashSecret(secret)}
	if kind == store.KeyManagement {
		k.Role, k.Scopes = store.RoleOwner, RoleScopes(store.RoleOwner)
	}
	return k, keyPrefix + marker + "_" + kid + "_" + secret, nil
}

// Caller is the authenticated identity of a request.
type Caller struct {
	Key store.Key
}

// credential reads the key from Authorization: Bearer or x-api-key, or, on a websocket
// handshake only, from the bearer subprotocol pair (websocketKey).
func credential(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token)
		}
		return ""
	}
	if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
		return k
	}
	return websocketKey(r)
}

// bearerSubprotocol is the websocket subprotocol that carries a key where the client cannot
// set a header: a browser's WebSocket sends only the protocols it is given, so the key is
// offered as the protocol after it, Sec-WebSocket-Protocol: model-gateway.bearer, <key>.
// The server selects bearerSubprotocol alone, so the key is never echoed, and a key never
// travels in a URL, which access logs and browser histories keep.
const bearerSubprotocol = "model-gateway.bearer"

// websocketKey is the key a websocket handshake offers after bearerSubprotocol; "" for
// any other request, so that no route but the websocket's reads it.
func websocketKey(r *http.Request) string {
	if !isWebsocketUpgrade(r) {
		return ""
	}
	offered := false
	for _, line := range r.Header.Values("Sec-Websocket-Protocol") {
		for p := range strings.SplitSeq(line, ",") {
			p = strings.TrimSpace(p)
			if offered {
				return p
			}
			offered = p == bearerSubprotocol
		}
	}
	return ""
}

// isWebsocketUpgrade reports whether r asks to become a websocket (RFC 6455 §4.1).
func isWebsocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether a comma-separated header of h lists token, in any case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, line := range h.Values(name) {
		for t := range strings.SplitSeq(line, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// permission is what a route asks of its caller (the route table's perm column). admits is
// the one check of it, whether the request came over HTTP (authorise) or is run in process
// for a caller already known.
type permission struct {
	key keyRequirement
	// area and access are, on a management route, the scope it needs, area:access
	// ("keys:write"), which the calling management key must hold (handlers/scopes.go).
	area   string
	access access
	// ownerOrAdmin: a management route that a member may not call whatever its scopes
	// (the specification's notification administration).
	ownerOrAdmin bool
	// signedLink: a request with no key that carries a signed link (a sig query
	// parameter) passes authentication without a caller (nil), and the route's handler
	// verifies the link, the one proof such a request has. A request with a key is checked
	// as key says.
	signedLink bool
}

// keyRequirement is the key a route needs.
type keyRequirement int

// The zero keyRequirement is none of these: a permission left unset admits nobody.
const (
	// noKey: the route reads no key, and a wrong one is not refused (health checks).
	noKey keyRequirement = iota + 1
	// anyKey: any valid key (discovery, the calling key, its own generations).
	anyKey
	// standardKey: a standard key (inference, jobs, files and batches).
	standardKey
	// managementKey: a management key (administration of the workspace).
	managementKey
)

// access is what a management route does in its area.
type access string

const (
	accessRead   access = "read"
	accessWrite  access = "write"
	accessDelete access = "delete"
)

var (
	permPublic    = permission{key: noKey}
	permAnyKey    = permission{key: anyKey}
	permInference = permission{key: standardKey}
	// permInferenceOrLink is permInference, or a signed download link in place of the key
	// (GET /videos/{id}/content).
	permInferenceOrLink = permission{key: standardKey, signedLink: true}
)

// permManagement is the permission of a management route that does access in area.
func permManagement(area string, a access) permission {
	return permission{key: managementKey, area: area, access: a}
}

// permOwnerOrAdmin is permManagement for an owner or admin key only.
func permOwnerOrAdmin(area string, a access) permission {
	p := permManagement(area, a)
	p.ownerOrAdmin = true
	return p
}

// scope names the management scope the permission needs, area:access; "" when it needs none.
func (p permission) scope() string {
	if p.key != managementKey {
		return ""
	}
	return p.area + ":" + string(p.access)
}

// admits checks an authenticated caller against the permission: nil when it may call the
// route, else the 403 to answer. c is nil only for a route that needs no key.
func (p permission) admits(c *Caller) *APIError {
	switch p.key {
	case noKey, anyKey:
		return nil
	case standardKey:
		if c.Key.Kind != store.KeyStandard {
			return newError(http.StatusForbidden, CodeForbidden, "management keys cannot call inference endpoints; use a standard key")
		}
		return nil
	case managementKey:
		if c.Key.Kind != store.KeyManagement {
			return newError(http.StatusForbidden, CodeForbidden, "this endpoint needs a management key")
		}
		if p.ownerOrAdmin && c.Key.Role != store.RoleOwner && c.Key.Role != store.RoleAdmin {
			e := newError(http.StatusForbidden, CodeRoleRequired, fmt.Sprintf("this endpoint needs an owner or admin key; this key's role is %s", c.Key.Role))
			e.Extra = map[string]any{"required_role": []string{string(store.RoleOwner), string(store.RoleAdmin)}}
			return e
		}
		if !slices.Contains(c.Key.Scopes, p.scope()) {
			return missingScope(c.Key.Role, p.scope())
		}
		return nil
	}
	return newError(http.StatusForbidden, CodeForbidden, "this endpoint admits no caller")
}

// authorise finds the caller of a request to a route and checks it against the route's
// permission (admits); a route that needs no key reads none, and its caller is nil.
func (g *Gateway) authorise(r *http.Request, p permission) (*Caller, *APIError) {
	if p.key == noKey || p.signedLink && r.Header.Get("Authorization") == "" && r.Header.Get("X-Api-Key") == "" && r.URL.Query().Has("sig") {
		return nil, nil
	}
	c, apiErr := g.authenticate(r)
	if apiErr != nil {
		return nil, apiErr
	}
	if apiErr := p.admits(c); apiErr != nil {
		return nil, apiErr
	}
	return c, nil
}

var errUnauthorised = newError(http.StatusUnauthorized, CodeUnauthorised, "missing or invalid API key: send it as \"Authorization: Bearer <key>\" or \"x-api-key: <key>\"")

// authenticate resolves the request's key. Every failure is the same 401 so that the
// answer tells an attacker nothing about which keys exist.
func (g *Gateway) authenticate(r *http.Request) (*Caller, *APIError) {
	raw := credential(r)
	if raw == "" {
		return nil, errUnauthorised
	}
	pk, err := ParseKey(raw)
	if err != nil {
		return nil, errUnauthorised
	}
	k, err := g.lookupKey(r, pk.ID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			return nil, g.storeUnavailable("key lookup", err)
		}
		// Compare anyway so that unknown and wrong keys take the same time.
		subtle.ConstantTimeCompare(HashSecret(pk.Secret), make([]byte, sha256.Size))
		return nil, errUnauthorised
	}
	if subtle.ConstantTimeCompare(HashSecret(pk.Secret), k.SecretHash) != 1 || k.Kind != pk.Kind {
		return nil, errUnauthorised
	}
	if k.RevokedAt != nil || k.Disabled {
		return nil, newError(http.StatusUnauthorized, CodeUnauthorised, "this API key is revoked or disabled")
	}
	return &Caller{Key: k}, nil
}

// keyCache keeps recently used keys for a moment, sparing the store a read on every request.
// A key revoked, disabled or changed through this gateway is forgotten at once; one changed by
// another process (the CLI, another instance) is seen within the TTL.
type keyCache struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[string]cachedKey
}

type cachedKey struct {
	key store.Key
	at  time.Time
}

// DefaultKeyCacheTTL is how long a key read from the store is trusted.
const DefaultKeyCacheTTL = 2 * time.Second

// lookupKey reads a key through the cache.
func (g *Gateway) lookupKey(r *http.Request, id string) (store.Key, error) {
	return g.lookupKeyContext(r.Context(), id)
}

// lookupKeyContext is lookupKey for a call without a request (a batch row).
func (g *Gateway) lookupKeyContext(reqCtx context.Context, id string) (store.Key, error) {
	now := g.Now()
	kc := g.keys
	if kc != nil && kc.ttl > 0 {
		kc.mu.Lock()
		ck, ok := kc.m[id]
		kc.mu.Unlock()
		if ok && now.Sub(ck.at) < kc.ttl {
			return ck.key, nil
		}
	}
	ctx, cancel := g.storeContext(reqCtx)
	k, err := g.Store.GetKey(ctx, id)
	cancel()
	if err != nil || kc == nil || kc.ttl <= 0 {
		return k, err
	}
	kc.mu.Lock()
	if len(kc.m) > 100_000 {
		clear(kc.m) // bounded: a flood of distinct keys cannot grow it without limit
	}
	kc.m[id] = cachedKey{key: k, at: now}
	kc.mu.Unlock()
	return k, nil
}

// forgetKey drops a key from the cache after it changed.
func (g *Gateway) forgetKey(id string) {
	if kc := g.keys; kc != nil {
		kc.mu.Lock()
		delete(kc.m, id)
		kc.mu.Unlock()
	}
}
