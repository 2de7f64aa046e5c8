#!/usr/bin/env python3
"""Writes one case per resource type and the output kustomize gives it under `namespace:`.

Run: python3 kustomize/tests/scope_cases/gen.py   (needs `kubectl` with Kustomize v5.5.0)
kustomize decides whether a type is namespaced from its built-in schema (kyaml/openapi, the
Kubernetes v1.21.2 schema), by exact apiVersion and kind; a type the schema does not list counts
as namespaced, so `namespace:` is set on it. Every case directory <case>/ holds a kustomization
(`namespace: ns1`, one object, plus a RoleBinding naming it so the name-reference rules see the
scope too) and kubectl's output in expected.yaml; kustomize/tests/scope_cases.rs compares.
"""
import os, shutil, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (apiVersion, kind): every cluster-scoped type of kustomize's built-in schema, the types the
# real API has cluster-scoped but the schema does not know, and some namespaced ones.
TYPES = [
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1beta1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1beta1", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io/v1beta1", "ValidatingAdmissionPolicy"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"),
    ("apiregistration.k8s.io/v1", "APIService"),
    ("apiregistration.k8s.io/v1beta1", "APIService"),
    ("certificates.k8s.io/v1", "CertificateSigningRequest"),
    ("certificates.k8s.io/v1beta1", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io/v1", "PriorityLevelConfiguration"),
    ("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io/v1beta3", "PriorityLevelConfiguration"),
    ("flowcontrol.apiserver.k8s.io/v1beta2", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io/v1beta2", "PriorityLevelConfiguration"),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "PriorityLevelConfiguration"),
    ("networking.k8s.io/v1", "IngressClass"),
    ("networking.k8s.io/v1beta1", "IngressClass"),
    ("node.k8s.io/v1", "RuntimeClass"),
    ("node.k8s.io/v1beta1", "RuntimeClass"),
    ("policy/v1beta1", "PodSecurityPolicy"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1beta1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1alpha1", "ClusterRole"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("scheduling.k8s.io/v1beta1", "PriorityClass"),
    ("storage.k8s.io/v1", "CSIDriver"),
    ("storage.k8s.io/v1", "CSINode"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "VolumeAttachment"),
    ("storage.k8s.io/v1beta1", "CSIDriver"),
    ("storage.k8s.io/v1beta1", "CSINode"),
    ("storage.k8s.io/v1beta1", "StorageClass"),
    ("storage.k8s.io/v1beta1", "VolumeAttachment"),
    ("storage.k8s.io/v1beta1", "CSIStorageCapacity"),
    ("v1", "ComponentStatus"),
    ("v1", "Namespace"),
    ("v1", "Node"),
    ("v1", "NodeProxyOptions"),
    ("v1", "PersistentVolume"),
    ("v1", "ConfigMap"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("authentication.k8s.io/v1", "TokenReview"),
    ("example.com/v1", "Widget"),
    ("example.com/v1", "Namespace"),
    ("example.com/v1", "ClusterRole"),
]

BINDING = """---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: rb
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: thing
subjects:
- kind: ServiceAccount
  name: thing
"""


def slug(api_version, kind):
    return f"{api_version.replace('/', '-').replace('.', '-')}-{kind}".lower()


def write_case(name, objs_yaml, kust):
    root = os.path.join(HERE, name)
    os.makedirs(root)
    with open(os.path.join(root, "res.yaml"), "w") as f:
        f.write(objs_yaml)
    with open(os.path.join(root, "kustomization.yaml"), "w") as f:
        f.write(kust)
    p = subprocess.run(["kubectl", "kustomize", root], capture_output=True, text=True)
    out = "expected.yaml" if p.returncode == 0 else "expected-error.txt"
    with open(os.path.join(root, out), "w") as f:
        f.write(p.stdout if p.returncode == 0 else p.stderr.split("err=", 1)[-1].strip().replace(HERE, "<cases>") + "\n")
    print(name, "ok" if p.returncode == 0 else "ERROR", file=sys.stderr)


def main():
    for d in os.listdir(HERE):
        if os.path.isdir(os.path.join(HERE, d)):
            shutil.rmtree(os.path.join(HERE, d))
    kust = "namespace: ns1\nnamePrefix: p-\nresources:\n- res.yaml\n"
    for av, kind in TYPES:
        obj = f"apiVersion: {av}\nkind: {kind}\nmetadata:\n  name: thing\n"
        write_case(slug(av, kind), obj + BINDING, kust)
    # an explicit namespace on a cluster-scoped and on a namespaced type
    for av, kind in [("rbac.authorization.k8s.io/v1", "ClusterRole"),
                     ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema")]:
        obj = f"apiVersion: {av}\nkind: {kind}\nmetadata:\n  name: thing\n  namespace: other\n"
        write_case("explicit-ns-" + slug(av, kind), obj, kust)


if __name__ == "__main__":
    main()
