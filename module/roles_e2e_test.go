package module

import (
	"net/http"
	"testing"
)

// Roles through the running gateway, as an operator meets them: the workspace's management
// key makes an admin, which cannot top up the wallet, make an owner or raise itself; a member
// it makes reads but cannot write.
func TestRolesEndToEnd(t *testing.T) {
	up := newFakeOpenAI(t, chatUsage(100, 0, 50, 0))
	env := startGateway(t, discoveryConfig(up.URL), "")
	a := env.team(5 * usd)

	owner := env.expect(200, http.MethodGet, a.mgmt, "/key", "")["data"].(map[string]any)
	if owner["role"] != "owner" {
		t.Fatalf("the workspace's management key: %v", owner)
	}
	admin := env.expect(201, http.MethodPost, a.mgmt, "/keys", `{"kind": "management", "name": "ops", "role": "admin"}`)["data"].(map[string]any)
	adminKey, adminID := admin["key"].(string), admin["id"].(string)

	env.expectError(403, "missing_scope", "scope", http.MethodPost, adminKey, "/credits", `{"amount_usd": "1000000"}`)
	env.expectError(403, "grant_exceeds_caller", "role", http.MethodPost, adminKey, "/keys", `{"kind": "management", "role": "owner"}`)
	env.expectError(403, "grant_exceeds_caller", "role", http.MethodPatch, adminKey, "/keys/"+adminID, `{"role": "owner"}`)
	env.expectError(403, "grant_exceeds_caller", "role", http.MethodDelete, adminKey, "/keys/"+owner["id"].(string), "")

	member := env.expect(201, http.MethodPost, adminKey, "/keys", `{"kind": "management", "role": "member"}`)["data"].(map[string]any)
	memberKey := member["key"].(string)
	env.expect(200, http.MethodGet, memberKey, "/credits", "")
	env.expectError(403, "missing_scope", "scope", http.MethodPost, memberKey, "/keys", `{"name": "more"}`)
	env.expectError(403, "forbidden", "", http.MethodGet, a.std, "/credits", "")

	// The owner still tops up.
	if v := env.expect(200, http.MethodPost, a.mgmt, "/credits", `{"amount_usd": "1"}`)["data"].(map[string]any); v["added_nanos"] != float64(usd) {
		t.Fatalf("owner top-up: %v", v)
	}
}
