//go:build tools

// Package tools pins the Kubernetes components the engines tier builds
// (go build k8s.io/kubernetes/cmd/<component> inside this module).
package tools

import (
	_ "k8s.io/component-base/cli"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
