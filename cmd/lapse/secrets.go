package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/lapsehq/lapse/web"
)

// minToken is the shortest --api-token accepted, on any address (a
// loopback one may be reached through a local proxy or another user's
// process): 16 random bytes cannot be guessed online, a word can.
const minToken = web.MinTokenLen

// secretFlag is a secret given as --<name> (or LAPSE_<NAME>) or read from the
// file --<name>-file names (or LAPSE_<NAME>_FILE): a mounted Kubernetes or
// Docker secret, kept out of the process list and out of the environment
// every child process inherits.
type secretFlag struct {
	name        string
	value, file *string
}

func addSecretFlag(fs *flagSet, name, usage string) secretFlag {
	return secretFlag{
		name:  name,
		value: fs.String(name, "", usage),
		file:  fs.String(name+"-file", "", "read --"+name+" from this file (its trailing newline trimmed)"),
	}
}

// get returns the secret ("" when neither is given). Its errors name the
// flags and the file, never the secret.
func (f secretFlag) get() (string, error) {
	switch {
	case *f.file == "":
		return *f.value, nil
	case *f.value != "":
		return "", fmt.Errorf("give --%s or --%s-file, not both (LAPSE_%s counts as --%[1]s)",
			f.name, f.name, strings.TrimPrefix(envName(f.name), "LAPSE_"))
	}
	b, err := os.ReadFile(*f.file)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", f.name, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("--%s-file %s: empty", f.name, *f.file)
	}
	return s, nil
}
