import ArgumentParser

struct CertCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cert",
        abstract: "Make the files of a TLS mesh: a CA, and certificates it issues to nodes and clients.",
        discussion: """
            Every node of a TLS mesh runs with --tls-cert, --tls-key and --tls-ca, and so \
            does the CLI that reaches it. A mesh needs one CA; each node and each client \
            gets a certificate of its own, with the name it is known by. Example:
              shoal cert ca --out ca
              shoal cert issue --ca ca --name till-1 --out till-1
              shoal run --data data --tls-cert till-1/till-1.pem --tls-key till-1/till-1.key --tls-ca ca/ca.pem
            Private keys are written readable by their owner only (mode 0600); keep the \
            CA's key away from the nodes.
            """,
        subcommands: [CertCACommand.self, CertIssueCommand.self]
    )
}
