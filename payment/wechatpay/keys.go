package wechatpay

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// ParsePrivateKey reads the merchant's API private key (apiclient_key.pem:
// PKCS #8 PEM; PKCS #1 PEM is taken too). Its errors never show the key.
func ParsePrivateKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("wechatpay: private key: not PEM")
	}
	var key *rsa.PrivateKey
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("wechatpay: private key: a %T, want RSA", k)
		}
		key = rk
	} else if key, err = x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		return nil, errors.New("wechatpay: private key: neither a PKCS #8 nor a PKCS #1 RSA private key")
	}
	if key.N.BitLen() < 2048 {
		return nil, fmt.Errorf("wechatpay: private key: %d bits, want at least 2048", key.N.BitLen())
	}
	return key, nil
}

// ParseCertificates reads WeChat Pay platform certificates: one or more PEM
// CERTIFICATE blocks (the one in use and, while WeChat Pay rotates them,
// the next).
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("wechatpay: platform certificate: %w", err)
		}
		if _, ok := c.PublicKey.(*rsa.PublicKey); !ok {
			return nil, fmt.Errorf("wechatpay: platform certificate %X: a %T key, want RSA", c.SerialNumber, c.PublicKey)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("wechatpay: platform certificate: no PEM CERTIFICATE block")
	}
	return certs, nil
}

// ParseAPIv3Key checks the APIv3 key: 32 bytes, as set in the merchant
// platform (a trailing newline is trimmed). Its errors never show the key.
func ParseAPIv3Key(data []byte) ([]byte, error) {
	k := strings.TrimRight(string(data), "\r\n")
	if len(k) != 32 {
		return nil, fmt.Errorf("wechatpay: APIv3 key: %d bytes, want 32", len(k))
	}
	return []byte(k), nil
}
