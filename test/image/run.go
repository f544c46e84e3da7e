package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// runner runs the image's entrypoint from its extracted filesystem as a container runtime would:
// with chroot, in a chroot of that filesystem as the image's user, with the image's environment
// and nothing else (no shell, no /proc, no host file); without, from the folder, /tmp pointed at
// the image's.
type runner struct {
	root   string
	cfg    *v1.ConfigFile
	chroot bool
}

func (r runner) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	argv := append(slices.Clone(r.cfg.Config.Entrypoint), args...)
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		return nil, fmt.Errorf("entrypoint %q is not an absolute path", r.cfg.Config.Entrypoint)
	}
	env := slices.Clone(r.cfg.Config.Env)
	if env == nil {
		env = []string{} // nil would be the checker's own environment
	}
	if !r.chroot {
		cmd := exec.CommandContext(ctx, filepath.Join(r.root, argv[0]), argv[1:]...)
		cmd.Dir, cmd.Env = r.root, append(env, "TMPDIR="+filepath.Join(r.root, "tmp"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd, nil
	}
	uid, gid, err := numericUser(r.cfg.Config.User)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = "/", env
	if r.cfg.Config.WorkingDir != "" {
		cmd.Dir = r.cfg.Config.WorkingDir
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     r.root,
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd, nil
}

// numericUser parses an image user of the form uid:gid.
func numericUser(u string) (uint32, uint32, error) {
	us, gs, ok := strings.Cut(u, ":")
	uid, err1 := strconv.ParseUint(us, 10, 32)
	gid, err2 := strconv.ParseUint(gs, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %q is not uid:gid", u)
	}
	return uint32(uid), uint32(gid), nil
}

// buildInfo is krteds' /version and `krteds version --json`.
type buildInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

func (b buildInfo) check(want Spec, where string) error {
	if b.Version != want.Version || b.Commit != want.Revision {
		return fmt.Errorf("%s says version %q commit %q; the labels say %q %q", where, b.Version, b.Commit, want.Version, want.Revision)
	}
	return nil
}

// RunDemo runs `krteds version --json` and `krteds serve --demo` from the image's filesystem:
// the version must be the labels', and the server must answer /ready and /version on loopback
// ports, then exit 0 on SIGTERM. It returns a line saying what ran.
func RunDemo(r runner, want Spec, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd, err := r.command(ctx, "version", "--json")
	if err != nil {
		return "", err
	}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("krteds version --json: %w %s", err, stderrOf(err))
	}
	var b buildInfo
	if err := json.Unmarshal(out, &b); err != nil {
		return "", fmt.Errorf("krteds version --json printed %q: %w", out, err)
	}
	if err := b.check(want, "krteds version"); err != nil {
		return "", err
	}

	xdsAddr, err := freePort()
	if err != nil {
		return "", err
	}
	debugAddr, err := freePort()
	if err != nil {
		return "", err
	}
	serve, err := r.command(ctx, "serve", "--demo", "--xds-addr", xdsAddr, "--debug-addr", debugAddr, "--drain-duration", "1s")
	if err != nil {
		return "", err
	}
	var logs bytes.Buffer
	serve.Stdout, serve.Stderr = &logs, &logs
	start := time.Now()
	if err := serve.Start(); err != nil {
		return "", fmt.Errorf("starting krteds serve --demo: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	stop := func() { _ = serve.Process.Kill(); <-exited }
	withLogs := func(err error) error {
		return fmt.Errorf("%w\nkrteds serve --demo printed:\n%s", err, logs.String())
	}
	// Nothing tells the checker when the server is ready but /ready: ask it until it says so.
	for ready := false; !ready; {
		select {
		case err := <-exited:
			exited <- err
			return "", withLogs(fmt.Errorf("krteds serve --demo exited before it was ready: %v", err))
		case <-ctx.Done():
			stop()
			return "", withLogs(fmt.Errorf("krteds serve --demo not ready within %s", timeout))
		case <-time.After(100 * time.Millisecond):
			ready = get(ctx, debugAddr, "/ready", nil) == nil
		}
	}
	took := time.Since(start)
	if err := get(ctx, debugAddr, "/version", &b); err != nil {
		stop()
		return "", withLogs(err)
	}
	if err := b.check(want, "/version"); err != nil {
		stop()
		return "", withLogs(err)
	}
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		stop()
		return "", err
	}
	select {
	case err := <-exited:
		if err != nil {
			return "", withLogs(fmt.Errorf("krteds serve --demo exited with %v on SIGTERM, want 0", err))
		}
	case <-ctx.Done():
		stop()
		return "", withLogs(errors.New("krteds serve --demo did not exit after SIGTERM"))
	}
	how := "from the extracted filesystem (not root: no chroot)"
	if r.chroot {
		how = fmt.Sprintf("in a chroot of the image's filesystem as user %s", r.cfg.Config.User)
	}
	return fmt.Sprintf("krteds serve --demo %s: ready in %s, /version %s %s, exit 0 on SIGTERM", how, took.Round(time.Millisecond), b.Version, b.Commit), nil
}

// get asks the debug port for a path; 200 is nil, into (if any) the JSON body.
func get(ctx context.Context, addr, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", path, resp.Status)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// canChroot reports whether this process may chroot and change user (root).
func canChroot() bool { return os.Geteuid() == 0 }

// ownedBy reports whether a file's owner is uid.
func ownedBy(fi os.FileInfo, uid uint32) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == uid
}
