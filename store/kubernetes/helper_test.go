package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/kubernetes"
)

// The test binary runs itself as a candidate process (tenure's or
// client-go's) when helperEnv names the role; helperArgsEnv holds its
// settings as JSON.
const (
	helperEnv     = "TENURE_K8S_HELPER"
	helperArgsEnv = "TENURE_K8S_HELPER_ARGS"
	roleTenure    = "tenure"
	roleClientGo  = "client-go"
)

// helperArgs are a candidate's settings.
type helperArgs struct {
	Kubeconfig string `json:"kubeconfig"`
	Namespace  string `json:"namespace"`
	Lease      string `json:"lease"`
	ID         string `json:"id"`
	Events     string `json:"events"` // file of events (JSON lines)
	// tenure
	TTL   time.Duration `json:"ttl"`
	Retry time.Duration `json:"retry"`
	// client-go
	LeaseDuration time.Duration `json:"leaseDuration"`
	RenewDeadline time.Duration `json:"renewDeadline"`
	RetryPeriod   time.Duration `json:"retryPeriod"`
}

// event is one line of a candidate's events file. T is CLOCK_MONOTONIC in
// nanoseconds, which every process on the host shares.
type event struct {
	Ev    string `json:"ev"` // ready, start (leading), end (stopped leading), stopped (OnStoppedLeading)
	T     int64  `json:"t"`
	ID    string `json:"id"`
	Token uint64 `json:"token,omitempty"`
	Why   string `json:"why,omitempty"`
}

func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// eventLog appends events to a file, one write(2) each, so that a process
// killed with SIGKILL leaves every event it wrote.
type eventLog struct {
	mu sync.Mutex
	f  *os.File
	id string
}

func (l *eventLog) emit(ev, why string, token uint64) {
	b, _ := json.Marshal(event{Ev: ev, T: mono(), ID: l.id, Token: token, Why: why})
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

func helperMain(role string, _ []string) int {
	var a helperArgs
	if err := json.Unmarshal([]byte(os.Getenv(helperArgsEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	f, err := os.OpenFile(a.Events, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	log := &eventLog{f: f, id: a.ID}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch role {
	case roleTenure:
		err = runTenureCandidate(ctx, a, log)
	case roleClientGo:
		err = runClientGoCandidate(ctx, a, log)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// runTenureCandidate contends for the Lease with a tenure Locker until ctx
// ends: it leads from the grant until its lease is lost (its context
// cancelled, at the local deadline at the latest) or ctx ends (then it
// stops leading first, and releases).
func runTenureCandidate(ctx context.Context, a helperArgs, log *eventLog) error {
	s, err := kubernetes.Open(ctx, kubernetes.Config{Kubeconfig: a.Kubeconfig, Namespace: a.Namespace})
	if err != nil {
		return err
	}
	defer s.Close()
	lk, err := tenure.New(s, tenure.WithOwnerID(a.ID), tenure.WithRetry(50*time.Millisecond, a.Retry))
	if err != nil {
		return err
	}
	defer lk.Close(context.Background())
	log.emit("ready", "", 0)
	for ctx.Err() == nil {
		l, err := lk.Acquire(ctx, a.Lease, a.TTL)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			time.Sleep(a.Retry)
			continue
		}
		log.emit("start", "", l.Token())
		select {
		case <-l.Done():
			log.emit("end", "lost: "+context.Cause(l.Context()).Error(), l.Token())
		case <-ctx.Done():
			log.emit("end", "stopping", l.Token())
			rctx, cancel := context.WithTimeout(context.Background(), a.TTL)
			_ = l.Release(rctx)
			cancel()
			return nil
		}
	}
	return nil
}

// runClientGoCandidate contends for the Lease with client-go's leader
// election (resourcelock.LeaseLock) until ctx ends, as its documentation
// asks of ReleaseOnCancel: the guarded work stops before the elector's
// context is cancelled.
func runClientGoCandidate(ctx context.Context, a helperArgs, log *eventLog) error {
	klog.SetOutput(os.Stderr)
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: a.Kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return err
	}
	rc.QPS = -1
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return err
	}
	// The work is guarded by workCtx: it ends with the elector's context
	// (a lost lease) or when the process is asked to stop, and the elector
	// is cancelled only after the work stopped.
	elect, cancelElect := context.WithCancel(context.Background())
	defer cancelElect()
	var mu sync.Mutex
	var working func() // stops the running work and waits for it
	stopping := false
	go func() {
		<-ctx.Done()
		mu.Lock()
		stopping = true
		w := working
		mu.Unlock()
		if w != nil {
			w()
		}
		cancelElect()
	}()
	log.emit("ready", "", 0)
	for elect.Err() == nil {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Lease},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: a.ID},
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   a.LeaseDuration,
			RenewDeadline:   a.RenewDeadline,
			RetryPeriod:     a.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            a.Lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					stopped := make(chan struct{})
					stopWork := make(chan struct{})
					var once sync.Once
					mu.Lock()
					if stopping {
						mu.Unlock()
						return
					}
					log.emit("start", "", 0)
					working = func() {
						once.Do(func() { close(stopWork) })
						<-stopped
					}
					mu.Unlock()
					select {
					case <-lctx.Done():
						log.emit("end", "lost (OnStartedLeading's context ended)", 0)
					case <-stopWork:
						log.emit("end", "stopping", 0)
					}
					mu.Lock()
					working = nil
					mu.Unlock()
					close(stopped)
				},
				OnStoppedLeading: func() { log.emit("stopped", "", 0) },
			},
		})
		if err != nil {
			return err
		}
		le.Run(elect)
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
