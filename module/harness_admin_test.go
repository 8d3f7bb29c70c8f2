package module

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// team is a workspace with a standard and a management key, as a dashboard and its
// applications would use it.
type team struct {
	ws, std, mgmt string
}

func (e *gatewayEnv) team(credits int64) team {
	e.t.Helper()
	ws, std := e.workspace(credits)
	return team{ws: ws, std: std, mgmt: e.key(ws, store.KeyManagement)}
}

// call sends a request with any method and a raw JSON body ("" for none) and decodes the
// JSON answer.
func (e *gatewayEnv) call(method, key, path, body string) (int, http.Header, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.baseURL+"/v1"+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		e.t.Fatalf("%s %s: not JSON: %s", method, path, data)
	}
	return resp.StatusCode, resp.Header, v
}

// expect is call that fails unless the status is want.
func (e *gatewayEnv) expect(want int, method, key, path, body string) map[string]any {
	e.t.Helper()
	status, _, v := e.call(method, key, path, body)
	if status != want {
		e.t.Fatalf("%s %s: %d %v, want %d", method, path, status, v, want)
	}
	return v
}

// expectError checks an error answer in the spec's shape with its code and param.
func (e *gatewayEnv) expectError(status int, code, param, method, key, path, body string) {
	e.t.Helper()
	got, _, v := e.call(method, key, path, body)
	errObj, _ := v["error"].(map[string]any)
	if got != status || errObj == nil || errObj["code"] != code || v["ok"] != false || v["status_code"] != float64(status) || v["message"] == "" {
		e.t.Fatalf("%s %s: %d %v, want %d %s", method, path, got, v, status, code)
	}
	if param != "" && errObj["param"] != param {
		e.t.Fatalf("%s %s: param %v, want %s", method, path, errObj["param"], param)
	}
}

func itemIDs(v map[string]any) []string {
	var out []string
	for _, it := range v["data"].([]any) {
		out = append(out, it.(map[string]any)["id"].(string))
	}
	return out
}

func findItem(t *testing.T, v map[string]any, id string) map[string]any {
	t.Helper()
	for _, it := range v["data"].([]any) {
		if m := it.(map[string]any); m["id"] == id {
			return m
		}
	}
	t.Fatalf("no %s in %v", id, itemIDs(v))
	return nil
}

// walkList reads every page of a list with the given page size.
func (e *gatewayEnv) walkList(key, path string, limit int) []string {
	e.t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var all []string
	after := ""
	for range 100 {
		q := path + sep + "limit=" + strconv.Itoa(limit)
		if after != "" {
			q += "&after=" + after
		}
		v := e.expect(200, http.MethodGet, key, q, "")
		all = append(all, itemIDs(v)...)
		if v["has_more"] != true {
			return all
		}
		after = v["last_id"].(string)
	}
	e.t.Fatal("pagination never ended")
	return nil
}

// chatUsage answers a non-streamed completion with the given usage, details included.
func chatUsage(prompt, cached, completion, reasoning int) func(w http.ResponseWriter, r *http.Request, req map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-usage", "object": "chat.completion", "created": 1700000000, "model": req["model"],
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
			"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
				"prompt_tokens_details":     map[string]any{"cached_tokens": cached},
				"completion_tokens_details": map[string]any{"reasoning_tokens": reasoning}},
		})
	}
}

// chatGeneration makes one chat request and returns the settled generation.
func (e *gatewayEnv) chatGeneration(key, wsID, model string) store.Generation {
	e.t.Helper()
	status, hdr, body := e.post(key, "/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		e.t.Fatalf("chat: %d %s", status, body)
	}
	return e.generation(wsID, hdr.Get("X-Generation-Id"))
}

// limitedKey creates a standard key with a spending limit directly in the store.
func (e *gatewayEnv) limitedKey(wsID string, limit int64, reset string) (id, plain string) {
	e.t.Helper()
	k, plain, err := handlers.NewKey(wsID, store.KeyStandard, "limited")
	if err != nil {
		e.t.Fatal(err)
	}
	k.CreatedAt, k.LimitNanos, k.LimitReset = time.Now(), limit, reset
	if err := e.store.CreateKey(context.Background(), k); err != nil {
		e.t.Fatal(err)
	}
	return k.ID, plain
}

// kidOf is the key id (kid) of a plaintext key.
func kidOf(t *testing.T, plain string) string {
	t.Helper()
	pk, err := handlers.ParseKey(plain)
	if err != nil {
		t.Fatal(err)
	}
	return pk.ID
}
