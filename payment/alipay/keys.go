package alipay

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// minKeyBits is the least RSA key size RSA2 is used with.
const minKeyBits = 2048

// keyDER returns the DER of a key given as PEM or as the bare base64 that
// Alipay's key tool and open platform show (one line, no header).
func keyDER(data []byte) ([]byte, error) {
	s := strings.TrimSpace(string(data))
	if strings.HasPrefix(s, "-----BEGIN") {
		block, _ := pem.Decode([]byte(s))
		if block == nil {
			return nil, errors.New("malformed PEM")
		}
		return block.Bytes, nil
	}
	s = strings.Join(strings.Fields(s), "")
	der, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("neither PEM nor base64") // the input may be a key: not shown
	}
	return der, nil
}

// ParsePrivateKey reads the app's RSA private key: PKCS #8 or PKCS #1, as
// PEM or as bare base64. Its errors never show the key.
func ParsePrivateKey(data []byte) (*rsa.PrivateKey, error) {
	der, err := keyDER(data)
	if err != nil {
		return nil, fmt.Errorf("alipay: private key: %w", err)
	}
	var key *rsa.PrivateKey
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("alipay: private key: a %T, want RSA", k)
		}
		key = rk
	} else if key, err = x509.ParsePKCS1PrivateKey(der); err != nil {
		return nil, errors.New("alipay: private key: neither a PKCS #8 nor a PKCS #1 RSA private key")
	}
	if key.N.BitLen() < minKeyBits {
		return nil, fmt.Errorf("alipay: private key: %d bits, RSA2 wants at least %d", key.N.BitLen(), minKeyBits)
	}
	return key, nil
}

// ParsePublicKey reads Alipay's RSA public key (支付宝公钥): PKIX or
// PKCS #1, as PEM or as bare base64.
func ParsePublicKey(data []byte) (*rsa.PublicKey, error) {
	der, err := keyDER(data)
	if err != nil {
		return nil, fmt.Errorf("alipay: public key: %w", err)
	}
	if k, err := x509.ParsePKIXPublicKey(der); err == nil {
		rk, ok := k.(*rsa.PublicKey)
		if !ok {
			return nil, fmt.Errorf("alipay: public key: a %T, want RSA", k)
		}
		return rk, nil
	}
	if k, err := x509.ParsePKCS1PublicKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("alipay: public key: neither a PKIX nor a PKCS #1 RSA public key")
}
