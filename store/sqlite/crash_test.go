//go:build unix

package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// crashDirEnv tells the test binary, re-executed by TestKillNineLosesNothing, to run
// TestCrashHelper's load against the database in that directory.
const crashDirEnv = "MODELGATEWAY_SQLITE_CRASH_DIR"

// crashLeasesEnv makes the child settle from credit leases (SettleLease), which the
// default DurableProcess store acknowledges from its journal before they are committed.
const crashLeasesEnv = "MODELGATEWAY_SQLITE_CRASH_LEASES"

const (
	crashWorkspace = "ws_crash"
	crashInitial   = 1_000_000 * usd
	crashReserve   = usd / 100
)

// TestCrashHelper is the child process of TestKillNineLosesNothing, and is skipped
// otherwise. It runs Reserve+Settle pairs from many goroutines until it is killed, and
// prints "gen <id> <cost>" for each generation only after Settle returned nil: the point
// where the gateway writes the last byte of the answer to the client.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestKillNineLosesNothing")
	}
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(dir, "gateway.db"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "Open:", err)
		os.Exit(2)
	}
	// A later round finds the workspace the first one funded.
	err = s.CreateWorkspace(ctx, store.Workspace{ID: crashWorkspace})
	if err == nil {
		_, err = s.AddCredits(ctx, crashWorkspace, crashInitial, "crash test")
	}
	if err != nil && !errors.Is(err, store.ErrConflict) {
		fmt.Fprintln(os.Stderr, "funding:", err)
		os.Exit(2)
	}
	// As the gateway's instance does: its reservations are its own, and the next Open's
	// sweep knows they are orphaned once this process is gone (checkAfterCrash).
	owner := fmt.Sprintf("inst_crash_%d", os.Getpid())
	if err := s.RegisterInstance(ctx, owner); err != nil {
		fmt.Fprintln(os.Stderr, "RegisterInstance:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	ack := func(g store.Generation) {
		// Unbuffered: once the parent can read the line, the "client" has it.
		mu.Lock()
		fmt.Fprintf(os.Stdout, "gen %s %d\n", g.ID, g.CostNanos)
		mu.Unlock()
	}
	leases := os.Getenv(crashLeasesEnv) != ""
	for w := range 48 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for leases {
				// As the gateway's leases do: one reservation holds 50 requests' worst case,
				// 40 requests settle from it, the last one releasing it.
				r, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: crashWorkspace, AmountNanos: 50 * crashReserve, ExpiresAt: time.Now().Add(time.Hour), Owner: owner})
				if err != nil {
					fmt.Fprintln(os.Stderr, "Reserve:", err)
					os.Exit(2)
				}
				for i := range 40 {
					g, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: r.ID, HeldNanos: crashReserve, Release: i == 39,
						Generation: &store.Generation{WorkspaceID: crashWorkspace, Model: "m", Status: 200, CostNanos: 1 + rng.Int64N(crashReserve)}})
					if err != nil {
						fmt.Fprintln(os.Stderr, "SettleLease:", err)
						os.Exit(2)
					}
					ack(g)
				}
			}
			for {
				r, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: crashWorkspace, AmountNanos: crashReserve, ExpiresAt: time.Now().Add(time.Hour), Owner: owner})
				if err != nil {
					fmt.Fprintln(os.Stderr, "Reserve:", err)
					os.Exit(2)
				}
				g, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{
					WorkspaceID: crashWorkspace, Model: "m", Status: 200, CostNanos: 1 + rng.Int64N(crashReserve),
				}})
				if err != nil {
					fmt.Fprintln(os.Stderr, "Settle:", err)
					os.Exit(2)
				}
				ack(g)
			}
		}()
	}
	// Never reached in a normal run; a child whose parent died does not linger.
	time.Sleep(60 * time.Second)
	fmt.Fprintln(os.Stderr, "crash helper: never killed")
	os.Exit(3)
}

// TestKillNineLosesNothing kills a process under load with SIGKILL, six times over the
// same database, and checks after each kill that every generation acknowledged so far (a
// response a client received) is recorded and charged, and that the wallet, the ledger
// and the generations agree.
//
// SIGKILL loses what the process had not handed to the kernel, not what the kernel had not
// written to the disk: this test proves no write is acknowledged before its transaction
// commits or its settlement is in the journal (replayed at the next Open);
// DurablePower's synchronous=FULL (TestPragmas) is what carries a commit through a power
// cut.
func TestKillNineLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, leases := range []bool{false, true} {
		t.Run(fmt.Sprintf("leases=%v", leases), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.db")
			acked := map[string]int64{}
			replayed := 0
			for round := range 6 {
				n := runAndKill(t, path, acked, leases)
				replayed += checkAfterCrash(t, path, acked)
				t.Logf("round %d: killed after %d acknowledged generations", round, n)
			}
			if leases && replayed == 0 {
				t.Error("no settlement was ever replayed from the journal: the test did not kill a process with journaled settlements pending")
			}
		})
	}
}

// runAndKill runs TestCrashHelper in a child process against the database at path, kills
// it with SIGKILL once it has acknowledged a few hundred generations, and adds every
// generation it acknowledged to acked. It returns how many it acknowledged.
func runAndKill(t *testing.T, path string, acked map[string]int64, leases bool) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+filepath.Dir(path))
	if leases {
		cmd.Env = append(cmd.Env, crashLeasesEnv+"=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := sync.OnceFunc(func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	defer kill()
	// A slow machine gets killed on time, with what it managed.
	timer := time.AfterFunc(5*time.Second, kill)
	defer timer.Stop()

	killAt := 100 + rand.IntN(300)
	n := 0
	var other []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "gen" {
			other = append(other, sc.Text())
			continue
		}
		cost, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("child printed %q", sc.Text())
		}
		acked[f[1]] = cost
		if n++; n == killAt {
			// Keep reading: lines already in the pipe were received too.
			kill()
		}
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL; stdout: %q; stderr: %s", err, other, stderr.String())
	}
	if n < 50 {
		t.Fatalf("the child acknowledged only %d generations before it was killed; stderr: %s", n, stderr.String())
	}
	return n
}

// checkAfterCrash reopens the database and checks it against what was acknowledged, then
// as the restarted gateway's instance does, frees what the killed process held, at once
// (its heartbeat is fresh, but its lock is gone with it), and checks again: releasing after
// the journal's replay loses no charge and charges nothing twice.
func checkAfterCrash(t *testing.T, path string, acked map[string]int64) (replayed int) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("reopening after the kill: %v", err)
	}
	defer s.Close()
	checkAcknowledged(t, s, acked)
	const self = "inst_check"
	if err := s.RegisterInstance(ctx, self); err != nil {
		t.Fatal(err)
	}
	n, err := s.ReleaseOrphaned(ctx, self, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.GetBalance(ctx, crashWorkspace); err != nil || b.ReservedNanos != 0 {
		t.Fatalf("after releasing %d reservations of the killed process: %+v, %v; want nothing reserved", n, b, err)
	}
	t.Logf("released the %d reservations the killed process held", n)
	checkAcknowledged(t, s, acked)
	if _, err := s.RetireInstance(ctx, self); err != nil {
		t.Fatal(err)
	}
	return s.replayed
}

// checkAcknowledged checks that every acknowledged generation is recorded and charged in
// full, and that the wallet, the ledger, the generations and the reservations agree.
func checkAcknowledged(t *testing.T, s *Store, acked map[string]int64) {
	t.Helper()
	ctx := context.Background()
	var check string
	if err := s.r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	for id, cost := range acked {
		g, err := s.GetGeneration(ctx, crashWorkspace, id)
		if err != nil {
			t.Fatalf("acknowledged generation %s lost: %v", id, err)
		}
		if g.CostNanos != cost || g.UnbilledNanos != 0 {
			t.Fatalf("acknowledged generation %s: cost %d unbilled %d, acknowledged %d", id, g.CostNanos, g.UnbilledNanos, cost)
		}
		var charged int64
		if err := s.r.QueryRowContext(ctx, `SELECT -amount_nanos FROM ledger WHERE generation_id = ? AND kind = 'charge'`, id).Scan(&charged); err != nil || charged != cost {
			t.Fatalf("ledger charge of %s = %d, %v; want %d", id, charged, err, cost)
		}
	}

	var stored, costs, bad, ledger, reservations int64
	err := s.r.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM generations WHERE workspace_id = ?1),
			(SELECT COALESCE(SUM(cost_nanos), 0) FROM generations WHERE workspace_id = ?1),
			(SELECT COUNT(*) FROM generations WHERE cost_nanos <= 0 OR unbilled_nanos <> 0),
			(SELECT SUM(amount_nanos) FROM ledger WHERE workspace_id = ?1),
			(SELECT COALESCE(SUM(amount_nanos), 0) FROM reservations WHERE workspace_id = ?1)`,
		crashWorkspace).Scan(&stored, &costs, &bad, &ledger, &reservations)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.GetBalance(ctx, crashWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d generations acknowledged, %d recorded (%d of them from the journal at reopening)", len(acked), stored, s.replayed)
	switch {
	case stored < int64(len(acked)):
		t.Errorf("%d generations recorded, fewer than the %d acknowledged", stored, len(acked))
	case b.BalanceNanos != crashInitial-costs:
		t.Errorf("balance %d, want the initial %d minus the recorded costs %d = %d", b.BalanceNanos, crashInitial, costs, crashInitial-costs)
	case ledger != b.BalanceNanos:
		t.Errorf("ledger sums to %d, balance is %d", ledger, b.BalanceNanos)
	case b.ReservedNanos != reservations:
		t.Errorf("wallet holds %d reserved, open reservations %d", b.ReservedNanos, reservations)
	case bad != 0:
		t.Errorf("%d generations with a cost that is not positive or was not fully billed", bad)
	case b.BalanceNanos < 0 || b.ReservedNanos < 0 || b.Available() < 0:
		t.Errorf("wallet went negative: %+v", b)
	}
}
