package handlers

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/catalog"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Every row of the route table names the permission its caller needs, and a management row
// names its scope as area:access.
func TestRouteTablePermissions(t *testing.T) {
	seen := map[string]bool{}
	for _, rt := range routeTable {
		row := rt.method + " " + rt.path
		if seen[row] {
			t.Errorf("%s: two rows", row)
		}
		seen[row] = true
		switch rt.perm.key {
		case noKey, anyKey, standardKey:
			if rt.perm.scope() != "" || rt.perm.area != "" || rt.perm.access != "" {
				t.Errorf("%s: a scope %q on a route that takes no management key", row, rt.perm.scope())
			}
		case managementKey:
			area, acc, _ := strings.Cut(rt.perm.scope(), ":")
			if area == "" || strings.ContainsAny(area, ": ") || !slices.Contains([]access{accessRead, accessWrite, accessDelete}, access(acc)) {
				t.Errorf("%s: management scope %q", row, rt.perm.scope())
			}
		default:
			t.Errorf("%s: no permission", row)
		}
	}
	if permManagement("keys", accessWrite).scope() != "keys:write" {
		t.Fatalf("scope %q", permManagement("keys", accessWrite).scope())
	}
	// A permission left unset admits nobody, whatever the key.
	for _, kind := range []store.KeyKind{store.KeyStandard, store.KeyManagement} {
		if e := (permission{}).admits(&Caller{Key: store.Key{Kind: kind}}); e == nil || e.Status != http.StatusForbidden {
			t.Fatalf("an unset permission admitted a %s key: %v", kind, e)
		}
	}
}

// Discovery's families are the route table's: each family a route serves a capability for
// is listed by GET /endpoints, may be configured for a model, and routes its capability's
// requests; GET /endpoints lists each family's listed rows and nothing else; and the
// families are those the catalogue's entries name.
func TestRouteTableFamiliesInDiscovery(t *testing.T) {
	a := newDiscoveryGateway(t)
	_, std, _ := a.workspace(0)
	v := a.mustDo(200, http.MethodGet, "/endpoints?limit=100", std, "")
	listed := map[string][]string{}
	var order []string
	for _, it := range v["data"].([]any) {
		f := it.(map[string]any)
		id := f["id"].(string)
		order = append(order, id)
		for _, r := range f["routes"].([]any) {
			r := r.(map[string]any)
			listed[id] = append(listed[id], r["method"].(string)+" "+r["path"].(string))
		}
	}
	if !reflect.DeepEqual(order, catalog.Endpoints) {
		t.Fatalf("GET /endpoints lists %v; the catalogue's endpoints are %v", order, catalog.Endpoints)
	}
	want := map[string][]string{}
	capabilities := 0
	for _, rt := range routeTable {
		f, cp := rt.of.family, rt.of.capability
		row := rt.method + " " + rt.path
		if f == nil {
			if cp != nil {
				t.Errorf("%s: a capability outside every family", row)
			}
			continue
		}
		if !rt.of.unlisted {
			want[f.id] = append(want[f.id], row)
		}
		if cp == nil {
			continue
		}
		capabilities++
		if !slices.Contains(order, f.id) {
			t.Errorf("%s: family %q is not in GET /endpoints", row, f.id)
		}
		if !slices.Contains(EndpointFamilies(), f.id) {
			t.Errorf("%s: family %q cannot be configured for a model (%v)", row, f.id, EndpointFamilies())
		}
		if capabilityFamily[cp] != f.id || !slices.Contains(familyCapabilities[f.id], cp) {
			t.Errorf("%s: capability indexed under %q, want %q", row, capabilityFamily[cp], f.id)
		}
	}
	if capabilities == 0 {
		t.Fatal("no row serves a capability")
	}
	if !reflect.DeepEqual(listed, want) {
		t.Fatalf("GET /endpoints routes\n%v\nwant the table's listed rows\n%v", listed, want)
	}
}

// keyNeeded is the key each route has needed since keys had two kinds, written apart from
// the table so that a row whose permission changes is caught: health checks read none;
// discovery, the calling key and its generations take any; administration a management key;
// everything else a standard key.
func keyNeeded(path string) keyRequirement {
	anyKeyPaths := []string{"/models", "/gateway/models", "/gateway/models/me", "/data/models", "/providers", "/endpoints",
		"/organisations", "/pricing/models", "/pricing/calculate", "/generations", "/generation", "/key"}
	switch {
	case path == "/health" || path == "/health/live":
		return noKey
	case slices.Contains(anyKeyPaths, path):
		return anyKey
	}
	for _, area := range []string{"/keys", "/workspaces", "/credits", "/activity", "/webhook-endpoints", "/notifications/"} {
		if path == area || strings.HasPrefix(path, strings.TrimSuffix(area, "/")+"/") {
			return managementKey
		}
	}
	return standardKey
}

// Authorisation is the row's permission, for every row: without a key, with a key of the
// other kind, and with a key the store does not know. A caller it admits reaches the handler.
func TestRouteTableAuthorisation(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	_, std, mgmt := a.workspace(0)
	unknown := "gateway_v1_sk_abcd_0123456789abcdef0123"
	concrete := func(path string) string {
		segs := strings.Split(path, "/")
		for i, s := range segs {
			if isParam(s) {
				segs[i] = "x1"
			}
		}
		return strings.Join(segs, "/")
	}
	for _, rt := range routeTable {
		path := concrete(rt.path)
		row := rt.method + " " + rt.path
		code := func(key string) string {
			t.Helper()
			_, v := a.do(rt.method, path, key, "{}")
			e, _ := v["error"].(map[string]any)
			c, _ := e["code"].(string)
			return c
		}
		need := keyNeeded(rt.path)
		if rt.perm.key != need {
			t.Errorf("%s: needs key %d, want %d", row, rt.perm.key, need)
		}
		admitted := map[string]bool{"": need == noKey, unknown: need == noKey, std: need != managementKey, mgmt: need != standardKey}
		for key, ok := range admitted {
			got := code(key)
			refused := got == CodeUnauthorised || got == CodeForbidden
			if ok == refused {
				t.Errorf("%s with key %q: error code %q; admitted: %v", row, key, got, ok)
			}
			if !ok && (key == std || key == mgmt) && got != CodeForbidden {
				t.Errorf("%s with key %q: %q, want forbidden", row, key, got)
			}
		}
	}
}
