// rflux-htpasswd prints one htpasswd line `<user>:<bcrypt hash>` for the test registry's
// htpasswd auth (distribution accepts only bcrypt). The password is read from stdin (one line,
// trailing newline dropped) so it never shows in a process list. Used when Apache's `htpasswd`
// is not installed. Usage: rflux-htpasswd <user> [cost] < password
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 || os.Args[1] == "" || strings.ContainsAny(os.Args[1], ":\n") {
		fmt.Fprintln(os.Stderr, "usage: rflux-htpasswd <user without ':'> [cost] < password")
		os.Exit(2)
	}
	cost := bcrypt.MinCost
	if len(os.Args) == 3 {
		c, err := strconv.Atoi(os.Args[2])
		if err != nil || c < bcrypt.MinCost || c > bcrypt.MaxCost {
			fmt.Fprintf(os.Stderr, "cost must be %d..%d\n", bcrypt.MinCost, bcrypt.MaxCost)
			os.Exit(2)
		}
		cost = c
	}
	password, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && password == "" {
		fmt.Fprintf(os.Stderr, "reading the password from stdin: %v\n", err)
		os.Exit(1)
	}
	password = strings.TrimSuffix(strings.TrimSuffix(password, "\n"), "\r")
	hash, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bcrypt: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\n", os.Args[1], hash)
}
