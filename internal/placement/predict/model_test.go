package predict

import (
	"math"
	"math/rand/v2"
	"testing"
)

func mustNew(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The fit recovers the coefficients that generated noisy synthetic data.
func TestModelRecoversCoefficients(t *testing.T) {
	want := []float64{0.02, 0.125, 0.5, 0.01} // intercept, then one slope per feature
	m := mustNew(t, Config{Dim: 4, Window: 512, MinSamples: 8, Lambda: 1e-6})
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		x := []float64{1, r.Float64() * 8, r.Float64() * 4, float64(r.IntN(32))}
		y := 0.0
		for i, c := range want {
			y += c * x[i]
		}
		m.Observe(x, y+r.NormFloat64()*0.002)
	}
	got := m.Coefficients()
	if got == nil {
		t.Fatal("no fit after 2000 observations")
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.005 {
			t.Errorf("coefficient %d = %.4f, want %.4f ± 0.005 (all: %v)", i, got[i], want[i], got)
		}
	}
	if y, ok := m.Predict([]float64{1, 2, 1, 10}); !ok || math.Abs(y-(0.02+0.25+0.5+0.1)) > 0.01 {
		t.Errorf("Predict = %v, %v; want 0.87", y, ok)
	}
}

// The window forgets: after the engine's speed changes, the fit follows the new speed.
func TestModelWindowForgets(t *testing.T) {
	m := mustNew(t, Config{Dim: 2, Window: 64, MinSamples: 4, Lambda: 1e-9})
	r := rand.New(rand.NewPCG(3, 4))
	for _, slope := range []float64{1, 0.25} {
		for range 200 {
			x := r.Float64() * 10
			m.Observe([]float64{1, x}, slope*x)
		}
	}
	if c := m.Coefficients(); math.Abs(c[1]-0.25) > 1e-6 {
		t.Errorf("slope = %v after the change, want 0.25", c[1])
	}
}

// A slope the data would make negative is dropped, not kept: more work never predicts faster.
func TestModelNonNegativeSlopes(t *testing.T) {
	m := mustNew(t, Config{Dim: 3, Window: 64, MinSamples: 4, Lambda: 1e-9})
	for i := range 64 {
		x1, x2 := float64(i%8), float64(i%5)
		m.Observe([]float64{1, x1, x2}, 1+0.5*x1-0.1*x2)
	}
	c := m.Coefficients()
	if c[2] != 0 || c[1] <= 0 {
		t.Errorf("coefficients %v: want the negative slope dropped to 0 and the other kept", c)
	}
}

// Before MinSamples the model does not predict; bad observations are dropped.
func TestModelColdAndBadInput(t *testing.T) {
	m := mustNew(t, Config{Dim: 2, Window: 16, MinSamples: 3, Lambda: 0.1})
	m.Observe([]float64{1, 1}, 1)
	m.Observe([]float64{1, 2}, math.NaN())
	m.Observe([]float64{1}, 1)
	m.Observe([]float64{1, math.Inf(1)}, 1)
	if _, ok := m.Predict([]float64{1, 1}); ok || m.Samples() != 1 {
		t.Fatalf("predicts after %d good samples (want cold after 1)", m.Samples())
	}
	m.Observe([]float64{1, 2}, 2)
	m.Observe([]float64{1, 3}, 3)
	if _, ok := m.Predict([]float64{1, 1}); !ok {
		t.Fatal("no prediction after MinSamples")
	}
	if _, ok := m.Predict([]float64{1}); ok {
		t.Error("predicted for a feature vector of the wrong length")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Dim: 0, Window: 4, MinSamples: 1},
		{Dim: 2, Window: 1, MinSamples: 2},
		{Dim: 2, Window: 8, MinSamples: 1},
		{Dim: 2, Window: 8, MinSamples: 9},
		{Dim: 2, Window: 8, MinSamples: 2, Lambda: -1},
		{Dim: 2, Window: 8, MinSamples: 2, Lambda: math.NaN()},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
