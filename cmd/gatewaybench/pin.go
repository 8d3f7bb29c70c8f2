package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// pinnedEnv marks the benchmark process that already runs on its share of the CPUs.
const pinnedEnv = "GATEWAYBENCH_PINNED"

// parseCPUs reads a CPU list in taskset's syntax ("1", "2,3", "0-3") into CPU numbers.
func parseCPUs(list string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad CPU %q in %q", part, list)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad CPU range %q in %q", part, list)
			}
		}
		for c := a; c <= b; c++ {
			if !slices.Contains(cpus, c) {
				cpus = append(cpus, c)
			}
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// cpuList writes CPU numbers in taskset's syntax.
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// splitCPUs checks the proxies' CPU list against the machine's n CPUs and returns the
// rest, where the load generator and the fake upstream run.
func splitCPUs(list string, n int) (proxies, rest []int, err error) {
	if proxies, err = parseCPUs(list); err != nil {
		return nil, nil, err
	}
	for _, c := range proxies {
		if c >= n {
			return nil, nil, fmt.Errorf("-proxy-cpus %s: this machine has CPUs 0-%d", list, n-1)
		}
	}
	for c := 0; c < n; c++ {
		if !slices.Contains(proxies, c) {
			rest = append(rest, c)
		}
	}
	if len(rest) == 0 {
		return nil, nil, fmt.Errorf("-proxy-cpus %s leaves no CPU for the load generator and the upstream", list)
	}
	return proxies, rest, nil
}

// pinSelf runs the benchmark again on the CPUs the proxies do not use, through taskset;
// it returns only if it could not. The fake upstream, a child of the benchmark, inherits
// that placement; the proxies are started on theirs (proxyCommand).
func pinSelf(list string) error {
	if os.Getenv(pinnedEnv) != "" {
		return nil
	}
	_, rest, err := splitCPUs(list, runtime.NumCPU())
	if err != nil {
		return err
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return errors.New("-proxy-cpus needs taskset (util-linux)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := append([]string{"taskset", "-c", cpuList(rest), self}, os.Args[1:]...)
	return syscall.Exec(taskset, args, append(os.Environ(), pinnedEnv+"=1"))
}

// proxyCommand returns the program and arguments that start a proxy: on the proxies' CPUs
// when they are pinned, as is otherwise.
func proxyCommand(list, bin string, args ...string) (string, []string) {
	if list == "" {
		return bin, args
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return bin, args
	}
	return taskset, append([]string{"-c", list, bin}, args...)
}
