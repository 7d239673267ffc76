// Package predict is the latency model of the predicted_latency placement policy: per worker, a
// linear regression of time to first token on what the gateway knows at pick time, refitted online
// from what it then measures.
//
// # Which model, and why
//
// A ridge-regularised least-squares fit over a sliding window of the worker's last Window
// observations, refitted from the window (the normal equations, solved by Cholesky) on every
// observation, with non-negative slopes. An engine's TTFT is, to first order, the prefill work queued
// ahead of the request plus the request's own uncached prompt, each divided by the engine's prefill
// speed, plus a fixed cost: linear in the features, with one slope per feature that is the engine's
// own speed. So a linear model is the simplest one that can be right, and its coefficients read as
// seconds per unit of work.
//
//   - A sliding window rather than recursive least squares: an engine's speed changes (another model
//     loaded, a longer context, a restart) and a window forgets old behaviour at a known rate, with
//     no forgetting factor to tune and no covariance matrix to drift numerically. With a handful of
//     features the refit costs Window x dim² multiplications (a few microseconds).
//   - Ridge (a small Lambda on the slopes, not the intercept): features move together (the queue
//     and the load rise at once) and the normal equations are then near-singular; the ridge keeps the
//     fit stable without biasing the intercept.
//   - Non-negative slopes: more work never makes an engine faster. A noisy window can still fit a
//     negative slope, which would make the policy prefer the busiest worker; a slope that comes out
//     negative is dropped and the fit redone without it (an active-set step of non-negative least
//     squares), so a bad fit predicts too flat, never backwards.
//
// # Concurrency
//
// Observe takes the model's mutex for one refit; Predict reads the coefficients through an atomic
// pointer and never blocks, so a pick is never held up by a refit.
package predict

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// Config sizes a Model.
type Config struct {
	// Dim is the number of features, the intercept's constant 1 included as feature 0.
	Dim int
	// Window is how many of the latest observations the fit uses.
	Window int
	// MinSamples is how many observations the model needs before it predicts; at least Dim.
	MinSamples int
	// Lambda is the ridge penalty on the slopes (not the intercept); at least 0.
	Lambda float64
}

// Validate reports a configuration the model cannot use.
func (c Config) Validate() error {
	var errs []error
	if c.Dim < 1 {
		errs = append(errs, fmt.Errorf("predict: dim %d must be at least 1", c.Dim))
	}
	if c.Window < c.Dim {
		errs = append(errs, fmt.Errorf("predict: window %d must be at least dim %d", c.Window, c.Dim))
	}
	if c.MinSamples < c.Dim || c.MinSamples > c.Window {
		errs = append(errs, fmt.Errorf("predict: min samples %d must be between dim %d and window %d", c.MinSamples, c.Dim, c.Window))
	}
	if !(c.Lambda >= 0) || math.IsInf(c.Lambda, 1) {
		errs = append(errs, fmt.Errorf("predict: lambda %v must be finite and at least 0", c.Lambda))
	}
	return errors.Join(errs...)
}

// Model is one worker's regression. The zero value is not usable: build it with New.
type Model struct {
	cfg Config

	mu   sync.Mutex // guards the window
	xs   []float64  // Window rows of Dim features, a ring
	ys   []float64
	n    int // rows held, up to Window
	next int // the ring's next row

	coef    atomic.Pointer[[]float64] // nil until MinSamples observations
	samples atomic.Int64
}

// New returns an empty model.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{cfg: cfg, xs: make([]float64, cfg.Window*cfg.Dim), ys: make([]float64, cfg.Window)}, nil
}

// Samples returns how many observations the model has had in all.
func (m *Model) Samples() int64 { return m.samples.Load() }

// Coefficients returns a copy of the fitted coefficients, intercept first; nil before MinSamples.
func (m *Model) Coefficients() []float64 {
	c := m.coef.Load()
	if c == nil {
		return nil
	}
	return append([]float64(nil), (*c)...)
}

// Predict returns the fitted value for x (len Dim, x[0] = 1), at least 0; ok is false until the
// model has MinSamples observations. It never blocks.
func (m *Model) Predict(x []float64) (y float64, ok bool) {
	c := m.coef.Load()
	if c == nil || len(x) != m.cfg.Dim {
		return 0, false
	}
	for i, v := range *c {
		y += v * x[i]
	}
	return max(y, 0), true
}

// Observe adds one observation (x of len Dim, x[0] = 1; y the measured value) and refits. An
// observation with a wrong length or a value that is not finite is dropped: one bad measurement must
// not poison the fit.
func (m *Model) Observe(x []float64, y float64) {
	if len(x) != m.cfg.Dim || !finite(y) || !allFinite(x) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.xs[m.next*m.cfg.Dim:], x)
	m.ys[m.next] = y
	m.next = (m.next + 1) % m.cfg.Window
	m.n = min(m.n+1, m.cfg.Window)
	if m.samples.Add(1) < int64(m.cfg.MinSamples) {
		return
	}
	if c := m.fitLocked(); c != nil {
		m.coef.Store(&c)
	}
}

// fitLocked solves the ridge normal equations over the window with non-negative slopes: a slope
// that comes out negative leaves the active set and the rest is refitted. nil when the system is
// singular even with the ridge (then the last fit stands).
func (m *Model) fitLocked() []float64 {
	d := m.cfg.Dim
	active := make([]bool, d)
	for i := range active {
		active[i] = true
	}
	for range d {
		c := m.solveLocked(active)
		if c == nil {
			return nil
		}
		dropped := false
		for i := 1; i < d; i++ {
			if active[i] && c[i] < 0 {
				active[i], dropped = false, true
			}
		}
		if !dropped {
			return c
		}
	}
	return nil
}

// solveLocked fits the active features only (the others' coefficients are 0).
func (m *Model) solveLocked(active []bool) []float64 {
	d := m.cfg.Dim
	idx := make([]int, 0, d)
	for i, a := range active {
		if a {
			idx = append(idx, i)
		}
	}
	k := len(idx)
	a := make([]float64, k*k)
	b := make([]float64, k)
	for r := range m.n {
		row := m.xs[r*d : (r+1)*d]
		for i, fi := range idx {
			b[i] += row[fi] * m.ys[r]
			for j, fj := range idx {
				a[i*k+j] += row[fi] * row[fj]
			}
		}
	}
	for i, fi := range idx {
		if fi != 0 { // the intercept is not shrunk
			a[i*k+i] += m.cfg.Lambda
		}
	}
	sol, ok := cholSolve(a, b, k)
	if !ok {
		return nil
	}
	c := make([]float64, d)
	for i, fi := range idx {
		c[fi] = sol[i]
	}
	return c
}

// cholSolve solves a x = b for a symmetric positive definite k x k matrix (row-major), in place.
func cholSolve(a, b []float64, k int) ([]float64, bool) {
	for j := range k {
		s := a[j*k+j]
		for p := range j {
			s -= a[j*k+p] * a[j*k+p]
		}
		if !(s > 1e-12) {
			return nil, false
		}
		l := math.Sqrt(s)
		a[j*k+j] = l
		for i := j + 1; i < k; i++ {
			t := a[i*k+j]
			for p := range j {
				t -= a[i*k+p] * a[j*k+p]
			}
			a[i*k+j] = t / l
		}
	}
	y := make([]float64, k)
	for i := range k { // L y = b
		t := b[i]
		for p := range i {
			t -= a[i*k+p] * y[p]
		}
		y[i] = t / a[i*k+i]
	}
	for i := k - 1; i >= 0; i-- { // Lᵀ x = y
		t := y[i]
		for p := i + 1; p < k; p++ {
			t -= a[p*k+i] * y[p]
		}
		y[i] = t / a[i*k+i]
	}
	return y, true
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func allFinite(x []float64) bool {
	for _, v := range x {
		if !finite(v) {
			return false
		}
	}
	return true
}
