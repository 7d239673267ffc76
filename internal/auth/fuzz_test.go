package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// FuzzParseKeys fuzzes the API keys file: never a panic, every accepted key is found by Lookup, and an
// error never repeats a key from the file.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte("# keys\nteam-a sk-aaaaaaaa\nops sk-bbbbbbbb admin\nsk-cccccccc\n"))
	f.Add([]byte("a b c d\n"))
	f.Add([]byte("x sk-1\nx sk-2\n"))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseKeys(data)
		if err != nil {
			for line := range bytes.SplitSeq(data, []byte("\n")) {
				fields := strings.Fields(string(line))
				if len(fields) >= 2 && len(fields[1]) >= 6 && strings.Contains(err.Error(), fields[1]) {
					t.Fatalf("error %q repeats a key", err)
				}
			}
			return
		}
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			fields := strings.Fields(string(line))
			if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
				continue
			}
			key := fields[0]
			if len(fields) > 1 {
				key = fields[1]
			}
			if _, ok := Lookup(keys, key); !ok {
				t.Fatalf("key of line %q not found", line)
			}
		}
	})
}

// FuzzVerifyJWT fuzzes token verification with a key set already held (no network): no panic, and only
// the untouched valid token is accepted.
func FuzzVerifyJWT(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	jwk := jose.JSONWebKey{Key: key, KeyID: "k", Algorithm: string(jose.ES256)}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jwk}, nil)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	valid, err := jwt.Signed(signer).Claims(map[string]any{"iss": "https://idp", "aud": "sluice", "sub": "a",
		"exp": now.Add(time.Hour).Unix(), "roles": []string{"admin"}}).Serialize()
	if err != nil {
		f.Fatal(err)
	}
	v := newJWTVerifier(JWTConfig{Issuer: "https://idp", Audience: "sluice", JWKSURI: "http://127.0.0.1:1/keys",
		RoleClaim: "roles", AdminRole: "admin", MinRefreshInterval: time.Hour}, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	v.keys.cur.Store(&cachedKeys{keys: []jose.JSONWebKey{jwk.Public()}, fetched: now})
	v.keys.lastAttempt = now // no fetch during the run
	f.Add(valid)
	f.Add(valid[:len(valid)-2])
	f.Add(strings.Replace(valid, ".", "..", 1))
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, token string) {
		p, err := v.verify(context.Background(), token)
		if err == nil && token != valid {
			t.Fatalf("accepted a token that is not the signed one: %q (%+v)", token, p)
		}
	})
}
