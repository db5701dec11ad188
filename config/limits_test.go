package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
)

func TestEffectiveLimits(t *testing.T) {
	t.Parallel()
	profile := events.Limits{MaxSteps: 8, MaxActive: events.Duration(time.Minute)}
	withProfile := func(edit func(*events.Limits)) events.Limits {
		l := config.DefaultLimits
		l.MaxSteps = 8
		l.MaxActive = events.Duration(time.Minute)
		if edit != nil {
			edit(&l)
		}
		return l
	}
	tests := []struct {
		name    string
		profile events.Limits
		given   *events.Limits
		want    events.Limits
		wantErr []events.FieldError
	}{
		{
			name:    "empty profile and no task limits give the defaults",
			profile: events.Limits{},
			want:    config.DefaultLimits,
		},
		{
			name:    "no task limits give the profile's",
			profile: profile,
			want:    withProfile(nil),
		},
		{
			name:    "zero task fields are not set",
			profile: profile,
			given:   &events.Limits{},
			want:    withProfile(nil),
		},
		{
			name:    "smaller task fields tighten",
			profile: profile,
			given:   &events.Limits{MaxSteps: 3, MaxActive: events.Duration(10 * time.Second), MaxObservationBytes: 1024},
			want: withProfile(func(l *events.Limits) {
				l.MaxSteps = 3
				l.MaxActive = events.Duration(10 * time.Second)
				l.MaxObservationBytes = 1024
			}),
		},
		{
			name:    "equal task fields are allowed",
			profile: profile,
			given:   &events.Limits{MaxSteps: 8, MaxToolCalls: config.DefaultLimits.MaxToolCalls},
			want:    withProfile(nil),
		},
		{
			name:    "tightening a defaulted field",
			profile: profile,
			given:   &events.Limits{MaxRunObservationKiB: 16},
			want:    withProfile(func(l *events.Limits) { l.MaxRunObservationKiB = 16 }),
		},
		{
			name:    "larger task fields are errors and the profile's stand",
			profile: profile,
			given:   &events.Limits{MaxSteps: 50, MaxActive: events.Duration(time.Hour), MaxToolCalls: 5},
			want:    withProfile(func(l *events.Limits) { l.MaxToolCalls = 5 }),
			wantErr: []events.FieldError{
				{Field: "/limits/max_active", Message: "may only tighten the profile's limit of 1m0s"},
				{Field: "/limits/max_steps", Message: "may only tighten the profile's limit of 8"},
			},
		},
		{
			name:    "loosening a defaulted field",
			profile: events.Limits{},
			given:   &events.Limits{MaxCorrections: 4},
			want:    config.DefaultLimits,
			wantErr: []events.FieldError{
				{Field: "/limits/max_corrections", Message: "may only tighten the profile's limit of 3"},
			},
		},
		{
			name:    "negative task fields are errors",
			profile: profile,
			given:   &events.Limits{MaxSteps: -1, MaxActive: events.Duration(-time.Second)},
			want:    withProfile(nil),
			wantErr: []events.FieldError{
				{Field: "/limits/max_active", Message: "must not be negative"},
				{Field: "/limits/max_steps", Message: "must not be negative"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, gotErr := config.EffectiveLimits(tt.profile, tt.given)
			if got != tt.want {
				t.Errorf("limits = %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(gotErr, tt.wantErr) {
				t.Errorf("errors = %q\nwant %q", gotErr, tt.wantErr)
			}
		})
	}
}

// A profile limit given as a value that reads as zero is refused, naming
// it: "0s" used to become the 2-minute default, 1e-400 an unbounded cost.
func TestAProfileLimitThatReadsAsZeroIsRefused(t *testing.T) {
	t.Parallel()
	for limit, field := range map[string]string{
		"max_active: 0s":            "/agents/helper/limits/max_active",
		"max_active: 0.0000000001s": "/agents/helper/limits/max_active",
		"max_cost_usd: 1e-400":      "/agents/helper/limits/max_cost_usd",
	} {
		given := strings.Replace(validYAML, "      max_active: 30s\n", "      "+limit+"\n", 1)
		if given == validYAML {
			t.Fatal("the test's config has no agents.helper.limits.max_active to replace")
		}
		_, err := config.Load(files(given), "loopgate.yaml")
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err %v, want one naming %s", limit, err, field)
		}
	}
}
