package webhook

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SecretPrefix starts every Standard Webhooks secret; the standard base64
// of the key follows it.
const SecretPrefix = "whsec_"

// MinSecretBytes is the shortest key accepted: the Standard Webhooks
// specification asks for 24 to 64 random bytes. Generate one with
//
//	echo "whsec_$(openssl rand -base64 32)"
const MinSecretBytes = 24

// maxSecretsFile bounds what ReadSecrets reads of a file: a secrets file is
// a few lines, and a wrong path (a log, a device) must not be read whole.
const maxSecretsFile = 64 << 10

// ReadSecrets returns the signing secrets of the --webhook-secret flag or
// the --webhook-secret-file file; exactly one of them must be given.
//
// The flag holds one secret, or several separated by spaces or commas
// during a rotation. The file holds one secret per line; blank lines and
// comments (from # to the end of the line) are ignored, so a rotation can
// be annotated. Every secret is checked as New does. Errors say which
// secret or line is wrong and how, never what it holds.
func ReadSecrets(flagValue, filePath string) ([]string, error) {
	secrets, err := ReadSecretsOf("--webhook-secret", flagValue, filePath)
	if err == nil && secrets == nil {
		return nil, errors.New("a webhook sink needs a signing secret: set --webhook-secret or --webhook-secret-file")
	}
	return secrets, err
}

// ReadSecretsOf is ReadSecrets for the secret flag named flag (its file
// flag is flag + "-file"): the order-service mode's secrets are read the
// same way as the sink's. Neither given is (nil, nil): the caller says
// what needs one.
func ReadSecretsOf(flag, flagValue, filePath string) ([]string, error) {
	fileFlag := flag + "-file"
	switch {
	case flagValue != "" && filePath != "":
		return nil, fmt.Errorf("%s and %s are both set: give one", flag, fileFlag)
	case flagValue != "":
		secrets := strings.FieldsFunc(flagValue, func(r rune) bool { return r == ',' || isSpace(r) })
		if len(secrets) == 0 {
			return nil, fmt.Errorf("%s: no secret, only separators", flag)
		}
		for i, secret := range secrets {
			if _, err := parseSecret(secret); err != nil {
				return nil, fmt.Errorf("%s: secret %d of %d: %w", flag, i+1, len(secrets), err)
			}
		}
		if err := checkDistinct(secrets); err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		return secrets, nil
	case filePath != "":
		return readSecretsFile(fileFlag, filePath)
	}
	return nil, nil
}

func readSecretsFile(fileFlag, path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fileFlag, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretsFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", fileFlag, path, err)
	}
	if len(b) > maxSecretsFile {
		return nil, fmt.Errorf("%s %s: larger than %d KiB; want one secret per line", fileFlag, path, maxSecretsFile>>10)
	}
	var secrets []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxSecretsFile+1)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.FieldsFunc(line, isSpace)
		switch {
		case len(fields) == 0:
			continue
		case len(fields) > 1:
			return nil, fmt.Errorf("%s %s line %d: %d words, want one secret per line", fileFlag, path, n, len(fields))
		}
		if _, err := parseSecret(fields[0]); err != nil {
			return nil, fmt.Errorf("%s %s line %d: %w", fileFlag, path, n, err)
		}
		secrets = append(secrets, fields[0])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", fileFlag, path, err)
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%s %s: no secret (only blank lines and comments)", fileFlag, path)
	}
	if err := checkDistinct(secrets); err != nil {
		return nil, fmt.Errorf("%s %s: %w", fileFlag, path, err)
	}
	return secrets, nil
}

// Signer signs Standard Webhooks messages with every secret of a rotation:
// a receiver that holds any one of them verifies the message.
type Signer struct {
	ws []*standardwebhooks.Webhook
}

// NewSigner checks secrets (whsec_…, distinct) and returns their signer.
func NewSigner(secrets []string) (*Signer, error) {
	ws, err := newSigners(secrets)
	if err != nil {
		return nil, err
	}
	if len(ws) == 0 {
		return nil, errors.New("no signing secret")
	}
	return &Signer{ws: ws}, nil
}

// Sign returns the webhook-signature header of a message: one v1
// signature per secret, separated by spaces.
func (s *Signer) Sign(id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, len(s.ws))
	for i, w := range s.ws {
		sig, err := w.Sign(id, ts, body)
		if err != nil {
			return "", err
		}
		sigs[i] = sig
	}
	return strings.Join(sigs, " "), nil
}

// newSigners checks secrets and returns a signer for each.
func newSigners(secrets []string) ([]*standardwebhooks.Webhook, error) {
	signers := make([]*standardwebhooks.Webhook, len(secrets))
	for i, secret := range secrets {
		key, err := parseSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("secret %d of %d: %w", i+1, len(secrets), err)
		}
		if signers[i], err = standardwebhooks.NewWebhookRaw(key); err != nil {
			return nil, fmt.Errorf("secret %d of %d: %w", i+1, len(secrets), err)
		}
	}
	if err := checkDistinct(secrets); err != nil {
		return nil, err
	}
	return signers, nil
}

// parseSecret returns the key of a whsec_ secret. Its errors describe the
// secret's shape, never its characters: they end up in logs.
func parseSecret(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("want %s followed by base64 (the value does not start with %s)", SecretPrefix, SecretPrefix)
	}
	// Standard base64 with padding, as the receivers' libraries decode it:
	// a secret only lapse could read would fail every verification.
	key, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		// The decoder's error is left out: it is harmless today (an
		// offset) but it is not this package's to vouch for.
		return nil, fmt.Errorf("want %s followed by standard base64 (A-Z a-z 0-9 + / and = padding); the %d characters after it are not", SecretPrefix, len(encoded))
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("the key is %d bytes, want at least %d random bytes", len(key), MinSecretBytes)
	}
	return key, nil
}

// checkDistinct refuses a secret given twice: a copy-paste slip during a
// rotation that would leave the new secret out.
func checkDistinct(secrets []string) error {
	first := make(map[string]int, len(secrets))
	for i, s := range secrets {
		if j, ok := first[s]; ok {
			return fmt.Errorf("secret %d repeats secret %d", i+1, j+1)
		}
		first[s] = i
	}
	return nil
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\r' || r == '\n' }
