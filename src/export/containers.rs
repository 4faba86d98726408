//! Containers: Kubernetes manifests, `docker run` flags and a compose fragment. A container
//! can set only per-network-namespace sysctls; the kernel-wide ones belong to the node, and
//! each output says which are which.

use super::{yq, Export, Kube};

/// A Deployment whose pods set the namespaced sysctls, and a privileged DaemonSet that sets the
/// kernel-wide ones on every node.
pub fn kubernetes(e: &Export) -> String {
    let mut s = e.header("kubernetes", "#");
    let netns = e.netns();
    let unsafe_keys: Vec<&str> = netns
        .iter()
        .filter(|x| x.kubernetes == Kube::Unsafe)
        .map(|x| x.key.as_str())
        .collect();
    if !unsafe_keys.is_empty() {
        s.push_str(&format!(
            "# The kubelet refuses the sysctls marked `unsafe` below unless the node allows them:\n\
             #   kubelet --allowed-unsafe-sysctls='{}'\n\
             # (or allowedUnsafeSysctls in the KubeletConfiguration / the node pool's kubelet config).\n\
             # A pod scheduled on a node that does not allow them fails with SysctlForbidden.\n",
            unsafe_keys.join(",")
        ));
    }
    if let Some(n) = e.nofile("kubernetes").0 {
        s.push_str(&format!(
            "# Open files: Kubernetes has no per-pod ulimit; containers inherit the container runtime's\n\
             # limit (containerd's or cri-o's LimitNOFILE). It must be at least {n} per server process.\n"
        ));
    }
    s.push_str(&format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: ws-server
  labels:
    app.kubernetes.io/name: ws-server
  annotations:
    wstune.dev/profile: {profile}
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: ws-server
  template:
    metadata:
      labels:
        app.kubernetes.io/name: ws-server
    spec:
      securityContext:
",
        profile = yq(&e.profile)
    ));
    if netns.is_empty() {
        s.push_str("        sysctls: []\n");
    } else {
        s.push_str("        sysctls:\n");
        for x in &netns {
            let mark = match x.kubernetes {
                Kube::Safe => "safe",
                _ => "unsafe: needs --allowed-unsafe-sysctls",
            };
            s.push_str(&format!(
                "          - name: {}  # {mark}\n            value: {}\n",
                x.key,
                yq(&x.value)
            ));
        }
    }
    s.push_str(
        "      containers:
        - name: server
          # Your WebSocket server's image (or wstune's own: `wstune serve --bind 0.0.0.0`).
          image: registry.example.com/ws-server:latest
          ports:
            - name: ws
              containerPort: 9001
",
    );
    let node = e.node();
    if node.is_empty() {
        return s;
    }
    // Only ever raised on the node it runs on, which may have more than the host the export
    // was made on: each value is compared with the node's own (awk: the rule per field) and
    // written only when that changes it. A key the node lacks (nf_conntrack not loaded) is
    // skipped with a line, not a failed init container.
    let mut script = format!(
        "set -e\nraise() {{ f=/proc/sys/$1; if [ ! -e \"$f\" ]; then echo \"wstune: $1 is not on this node (module not loaded?): left alone\" >&2; return 0; fi; cur=$(cat \"$f\"); new=$(echo \"$cur\" | awk -v r=\"$2\" -v want=\"$3\" '{}'); if [ \"$new\" != \"$(echo $cur)\" ]; then echo \"$new\" > \"$f\"; fi; }}\n",
        super::RAISE_AWK
    );
    for x in &node {
        script.push_str(&format!(
            "raise {} {} '{}'\n",
            x.key.replace('.', "/"),
            x.rule,
            x.value
        ));
    }
    s.push_str(&format!(
        "---
# Kernel-wide sysctls cannot be set from a pod's securityContext: this DaemonSet sets them on
# every node at pod start (so again after a reboot). A managed node pool may offer its own
# setting for them (GKE linuxNodeConfig, EKS launch-template user data, AKS linuxOSConfig).
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: wstune-node-sysctls
  namespace: kube-system
  labels:
    app.kubernetes.io/name: wstune-node-sysctls
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: wstune-node-sysctls
  template:
    metadata:
      labels:
        app.kubernetes.io/name: wstune-node-sysctls
    spec:
      tolerations:
        - operator: Exists
      initContainers:
        - name: sysctls
          image: busybox:1.36
          securityContext:
            privileged: true
          command:
            - sh
            - -c
            - {script}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources:
            requests:
              cpu: 1m
              memory: 4Mi
",
        script = yq(&script)
    ));
    s
}

/// `docker run` flags: every namespaced sysctl and the fd limit.
pub fn docker(e: &Export) -> String {
    let mut s = e.header("docker", "#");
    let node = e.node();
    if !node.is_empty() {
        s.push_str("# Kernel-wide: docker cannot set these per container; set them on the host (`wstune export --to sysctl`):\n");
        for x in &node {
            s.push_str(&format!("#   {} = {}\n", x.key, x.value));
        }
    }
    s.push_str("docker run \\\n");
    for x in e.netns() {
        s.push_str(&format!(
            "  --sysctl {} \\\n",
            shell_quote(&format!("{}={}", x.key, x.value))
        ));
    }
    if let Some(n) = e.nofile("docker").0 {
        s.push_str(&format!("  --ulimit nofile={n}:{n} \\\n"));
    }
    s.push_str("  \"${IMAGE:?set IMAGE to the image of your WebSocket server}\" \"$@\"\n");
    s
}

/// A compose fragment for one service.
pub fn compose(e: &Export) -> String {
    let mut s = e.header("compose", "#");
    let node = e.node();
    if !node.is_empty() {
        s.push_str("# Kernel-wide keys belong to the host, not the service:");
        for x in &node {
            s.push_str(&format!(" {}", x.key));
        }
        s.push_str(" (`wstune export --to sysctl`).\n");
    }
    s.push_str(
        "services:\n  ws-server:\n    image: ${IMAGE:-registry.example.com/ws-server:latest}\n",
    );
    let netns = e.netns();
    if !netns.is_empty() {
        s.push_str("    sysctls:\n");
        for x in netns {
            s.push_str(&format!("      {}: {}\n", x.key, yq(&x.value)));
        }
    }
    if let Some(n) = e.nofile("compose").0 {
        s.push_str(&format!(
            "    ulimits:\n      nofile:\n        soft: {n}\n        hard: {n}\n"
        ));
    }
    s
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "._=-:/".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
