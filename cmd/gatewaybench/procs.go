package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the benchmark started and must stop.
type child struct {
	name string
	bin  string
	args []string
	env  []string
	log  string
	// health is a URL that answers once the process serves.
	health string
	// admin is the port of the proxy's admin endpoint (0: none).
	admin int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	childrenMu sync.Mutex
	children   []*child
)

// startChild starts a process with its output in <dir>/<name>.log. The child gets SIGKILL
// if the benchmark dies without stopping it.
func startChild(name, dir string, env []string, bin string, args ...string) (*child, error) {
	c := &child{name: name, bin: bin, args: args, env: env, log: filepath.Join(dir, name+".log")}
	if err := c.start(); err != nil {
		return nil, err
	}
	childrenMu.Lock()
	children = append(children, c)
	childrenMu.Unlock()
	return c, nil
}

func (c *child) start() error {
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, c.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("starting %s: %w", c.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(done)
	}()
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
	return nil
}

// restart stops the process and starts it again, and waits until it serves.
func (c *child) restart(ctx context.Context) error {
	c.stop()
	if err := c.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, c, http.MethodGet, c.health, 30*time.Second)
}

func (c *child) current() (*exec.Cmd, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd, c.done
}

func (c *child) pid() int {
	cmd, _ := c.current()
	return cmd.Process.Pid
}

// stop asks the process to end, then kills it after a grace period.
func (c *child) stop() {
	cmd, done := c.current()
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// stopChildren stops every child started, the last first.
func stopChildren() {
	childrenMu.Lock()
	cs := append([]*child(nil), children...)
	children = nil
	childrenMu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].stop()
	}
}

// exited reports an error if the child is no longer running.
func (c *child) exited() error {
	cmd, done := c.current()
	select {
	case <-done:
		tail, _ := os.ReadFile(c.log)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("%s exited (%s); end of %s:\n%s", c.name, cmd.ProcessState, c.log, tail)
	default:
		return nil
	}
}

// freePort picks a free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitHTTP polls url until it answers at all, the child dies or the timeout passes.
func waitHTTP(ctx context.Context, c *child, method, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, method, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			client.CloseIdleConnections()
			return nil
		}
		if err := c.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not answer on %s within %s: %v", c.name, url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux ABI Go runs on.
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU time a process (all its threads) has used.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it are plain.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed /proc stat times")
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// procRSS is a process's resident set size in bytes.
func procRSS(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0, errors.New("malformed /proc statm")
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, err
	}
	return pages * int64(os.Getpagesize()), nil
}

// buildCaddy builds the project's Caddy (./cmd/caddy of the module that holds the working
// directory) into dir.
func buildCaddy(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run the benchmark inside the caddy-modelgateway module, or pass -caddy")
	}
	bin := filepath.Join(dir, "caddy")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "gatewaybench", "-o", bin, "./cmd/caddy")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building caddy: %w\n%s", err, out)
	}
	return bin, nil
}

// adminLine is the global admin option: on localhost at port, or off for port 0.
func adminLine(port int) string {
	if port == 0 {
		return "admin off"
	}
	return fmt.Sprintf("admin localhost:%d", port)
}

// plainCaddyfile is the reference arm: reverse_proxy and nothing else, with the same
// upstream transport settings as the gateway's providers.
func plainCaddyfile(port, upstreamPort, adminPort, idleConns int) string {
	return fmt.Sprintf(`{
	%s
	persist_config off
	auto_https off
	grace_period 1s
}

http://127.0.0.1:%d {
	reverse_proxy 127.0.0.1:%d {
		transport http {
			keepalive_idle_conns_per_host %d
		}
	}
}
`, adminLine(adminPort), port, upstreamPort, idleConns)
}

// gatewayCaddyfile configures the gateway: an OpenAI-wire provider and an Anthropic-wire
// provider on the fake upstream, priced models on each (so every request reserves and
// settles; the media tests' on the OpenAI-wire one), the batch options (batchOptions, ""
// but for the batch-load test), and the API on /v1.
func gatewayCaddyfile(port, upstreamPort, adminPort, idleConns int, dbPath, batchOptions string) string {
	return fmt.Sprintf(`{
	%[1]s
	persist_config off
	auto_https off
	grace_period 1s
	model_gateway {
		store sqlite %[2]s
		%[6]s
		provider oa {
			type openai
			base_url http://127.0.0.1:%[3]d/v1
			api_key sk-bench-upstream
			stream_idle_timeout 5m
			transport http {
				keepalive_idle_conns_per_host %[4]d
			}
		}
		provider an {
			type anthropic
			base_url http://127.0.0.1:%[3]d
			api_key sk-ant-bench-upstream
			stream_idle_timeout 5m
			transport http {
				keepalive_idle_conns_per_host %[4]d
			}
		}
		model bench-oa {
			owned_by bench
			route oa up-model {
				input 0.15
				output 0.60
			}
		}
		model bench-an {
			owned_by bench
			route an up-model {
				input 3.00
				output 15.00
			}
		}
		model bench-an-cheap {
			owned_by bench
			route an up-model {
				input 0.15
				output 0.60
			}
		}
		model bench-tts {
			owned_by bench
			route oa up-tts {
				input_characters 15
			}
		}
		model bench-whisper {
			owned_by bench
			route oa up-whisper {
				input_audio_seconds 0.0001
			}
		}
		model bench-video {
			owned_by bench
			route oa up-video {
				output_video_seconds 0.10 resolution 720p
			}
		}
		model bench-image {
			owned_by bench
			route oa up-image {
				input 5
				image_input_tokens 10
				image_output_tokens 40
			}
		}
	}
}

http://127.0.0.1:%[5]d {
	route /v1/* {
		model_gateway {
			stream_idle_timeout 5m
		}
	}
}
`, adminLine(adminPort), dbPath, upstreamPort, idleConns, port, batchOptions)
}

var keyPattern = regexp.MustCompile(`gateway_v1_sk_[a-z0-9]+_[a-z0-9]+`)

// bootstrap creates a workspace with credits and a standard key in the gateway's store
// with "caddy gateway bootstrap", and returns the key.
func bootstrap(ctx context.Context, caddyBin, config string, env []string, name, credits string) (string, error) {
	cmd := exec.CommandContext(ctx, caddyBin, "gateway", "bootstrap", "--config", config, "--adapter", "caddyfile", "--name", name, "--credits", credits)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("caddy gateway bootstrap: %w\n%s", err, out)
	}
	key := keyPattern.Find(out)
	if key == nil {
		return "", fmt.Errorf("caddy gateway bootstrap printed no key:\n%s", out)
	}
	return string(key), nil
}
