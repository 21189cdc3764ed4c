// Package chart holds the tests of Flow's Helm chart (deploy/helm/flow):
// they render it with Helm's own packages for several value sets, decode
// every object strictly into the Kubernetes API types and check it
// against what Flow reads (chart_test.go); with the imagetest build tag,
// they run the image the way the chart runs it (image_test.go, `make
// image-test`). Nothing imports it: Helm's and Kubernetes' packages are
// compiled only here.
package chart
