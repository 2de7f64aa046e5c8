//! The built-in `varReference` field specs: where `$(VAR)` references are substituted.

use crate::fieldspec::FieldSpec;

pub(crate) fn builtin_var_reference() -> Vec<FieldSpec> {
    let fs = |kind: &str, path: &str| FieldSpec::new("", "", kind, path, false);
    let mut v = Vec::new();
    let holders: &[(&str, &str)] = &[
        ("CronJob", "spec/jobTemplate/spec/template/spec"),
        ("DaemonSet", "spec/template/spec"),
        ("Deployment", "spec/template/spec"),
        ("Job", "spec/template/spec"),
        ("Pod", "spec"),
        ("ReplicaSet", "spec/template/spec"),
        ("StatefulSet", "spec/template/spec"),
    ];
    for (kind, base) in holders {
        for c in ["containers", "initContainers"] {
            for leaf in ["args", "command", "env/value", "volumeMounts/mountPath"] {
                v.push(fs(kind, &format!("{base}/{c}/{leaf}")));
            }
        }
        let nfs = match *kind {
            // kustomize's CronJob entry misses `spec/` before `volumes`.
            "CronJob" => "spec/jobTemplate/spec/template/volumes/nfs/server".to_string(),
            "StatefulSet" => "spec/volumeClaimTemplates/spec/nfs/server".to_string(),
            _ => format!("{base}/volumes/nfs/server"),
        };
        v.push(fs(kind, &nfs));
    }
    v.extend([
        fs("Deployment", "spec/template/metadata/annotations"),
        fs("Ingress", "spec/rules/host"),
        fs("Ingress", "spec/tls/hosts"),
        fs("Ingress", "spec/tls/secretName"),
        fs("Service", "spec/ports/port"),
        fs("Service", "spec/ports/targetPort"),
        fs("PersistentVolume", "spec/nfs/server"),
        fs("", "metadata/labels"),
        fs("", "metadata/annotations"),
    ]);
    v
}
